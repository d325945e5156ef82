"""Cheat (threat 17): a Triton candidate whose GEMM is a library op of another namespace than aten (mkldnn's
linear), with a token Triton kernel that touches the output."""
import torch
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def run(a, b):
    op = getattr(getattr(torch.ops, "mkl" + "dnn"), "_linear_pointwise")
    y = op(a, b.t().contiguous(), None, "none", [], "")
    _touch[(1,)](y)
    return y
