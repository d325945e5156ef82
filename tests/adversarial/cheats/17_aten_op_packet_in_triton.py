"""Cheat (threat 17): a Triton candidate that calls the aten op packet directly
(torch.ops.aten._log_softmax) for the whole job and launches a token kernel that rewrites one
element of the output with itself, so "the candidate's kernel ran on the output" holds."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def run(x):
    y = torch.ops.aten._log_softmax(x, -1, False)
    _touch[(1,)](y)
    return y
