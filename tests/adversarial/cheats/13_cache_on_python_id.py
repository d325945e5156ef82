"""Cheat (threat 13): outputs cached by id() of the input tensors; CPython reuses the id of a freed
object for the next one, so new inputs often look like old ones (reliably only where the input
buffers themselves are recycled, as with the CUDA caching allocator: the case is CUDA-only)."""
import torch
import triton
import triton.language as tl

_CACHE = {}


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, x / tl.sqrt(tl.sum(x * x, axis=0) / n + eps) * w, mask=mask)


def run(x, w):
    key = (id(x), id(w))
    if key in _CACHE:
        return _CACHE[key]
    y = torch.empty_like(x)
    _rmsnorm[(x.shape[0],)](x, w, y, x.shape[1], x.stride(0), 1e-6, BLOCK=triton.next_power_of_2(x.shape[1]))
    _CACHE[key] = y
    return y
