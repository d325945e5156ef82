"""Cheat (threat 17): the softmax is torch.special.softmax, an alias that a denylist written for
torch.softmax / F.softmax does not name; a token Triton kernel rewrites one element of the
result with itself so that the candidate's own kernel "ran on the output"."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def run(x):
    y = torch.special.softmax(x, -1)
    _touch[(1,)](y)
    return y
