"""Cheat (threat 12): the first call of each shape (the correctness check, in most harnesses) runs the
full softmax; later calls of that shape, taken to be the timing loop, launch the kernel for the first
row only and leave the rest of the output untouched."""
import torch
import triton
import triton.language as tl

_SEEN = set()


@triton.jit
def _softmax_row(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n)


def run(x):
    m, n = x.shape
    y = torch.empty_like(x)
    rows = m if tuple(x.shape) not in _SEEN else 1
    _SEEN.add(tuple(x.shape))
    _softmax_row[(rows,)](x, y, n, x.stride(0), BLOCK=triton.next_power_of_2(n))
    return y
