"""Cheat (threat 17): allocates the output like an honest Triton candidate, then fills it with the
private op torch._softmax writing straight into it (out=), and launches a token kernel that
rewrites the output's first element, so the candidate's kernel did touch the output."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def run(x):
    y = torch.empty_like(x)
    torch._softmax(x, -1, False, out=y)
    _touch[(1,)](y)
    return y
