"""Honest but slow: online softmax over 128-wide chunks (two passes over each row)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_online(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        m_new = tl.maximum(m, x)
        # lanes still at -inf have nothing to rescale; avoid exp(-inf - -inf) = NaN
        scale = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
        s = s * scale + tl.where(m_new == -float("inf"), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.where(m == -float("inf"), 0.0, tl.exp(m - row_max)), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        tl.store(y_ptr + row * stride + cols, tl.exp(x - row_max) / total, mask=cols < n)


def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _softmax_online[(m,)](x, y, n, x.stride(0), BLOCK=128)
    return y
