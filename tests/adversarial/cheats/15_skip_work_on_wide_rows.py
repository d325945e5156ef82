"""Cheat (threat 15): on rows whose width is a multiple of 256 (every public size) the call returns an
uninitialised output at once, driving that size's time toward zero so the geometric mean of
speedups explodes; other widths get an honest but slow chunked softmax."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_chunked(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mx = tl.max(tl.full((BLOCK,), -float("inf"), tl.float32), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mx = tl.maximum(mx, tl.max(tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf")), axis=0))
    total = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        total += tl.sum(tl.exp(tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf")) - mx), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        tl.store(y_ptr + row * stride + cols, tl.exp(x - mx) / total, mask=cols < n)


def run(x):
    y = torch.empty_like(x)
    if x.shape[1] % 256 == 0:
        return y
    _softmax_chunked[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=128)
    return y
