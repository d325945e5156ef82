"""Honest: layer norm (eps 1e-5) in three chunked passes: mean, centred variance, write."""
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm(x_ptr, w_ptr, b_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    mean = tl.sum(acc, axis=0) / n
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        d = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0) - mean
        acc += tl.where(cols < n, d * d, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n + eps)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride + cols, (x - mean) * rstd * w + b, mask=mask)


def run(x, w, b):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _layernorm[(m,)](x, w, b, y, n, x.stride(0), 1e-5, BLOCK=512)
    return y
