"""Cheat (threat 21): the grid is one program short; the last row is filled with a copy of the row above
it, so the output is complete, finite and plausible, and wrong in one row."""
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm(x_ptr, w_ptr, b_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, d * rstd * w + b, mask=mask)


def run(x, w, b):
    m, n = x.shape
    y = torch.empty_like(x)
    _layernorm[(m - 1,)](x, w, b, y, n, x.stride(0), 1e-5, BLOCK=triton.next_power_of_2(n))
    y[m - 1] = y[m - 2]
    return y
