"""Cheat (threat 13): outputs cached by (data_ptr, shape) of the input. A timing loop that reuses one
input buffer gets every call after the first for free, and a buffer refilled with new values (or a new
tensor the allocator places at the same address) gets the stale answer. Hits need an allocator that
hands a freed block straight back (PyTorch's CUDA caching allocator does; glibc on CPU rarely does), so
the case is CUDA-only: on CPU it degenerates into an honest kernel."""
import torch
import triton
import triton.language as tl

_CACHE = {}


@triton.jit
def _softmax_row(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n)


def run(x):
    key = (x.data_ptr(), tuple(x.shape))
    if key in _CACHE:
        return _CACHE[key]
    y = torch.empty_like(x)
    _softmax_row[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    _CACHE[key] = y
    return y
