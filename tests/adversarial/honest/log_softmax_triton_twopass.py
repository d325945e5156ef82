"""Honest: log-softmax with an online max/sum pass, then a write pass (512-wide chunks)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _log_softmax(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        m_new = tl.maximum(m, x)
        s = tl.where(m_new == -float("inf"), 0.0, s * tl.exp(m - m_new) + tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - row_max)), axis=0))
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
        tl.store(y_ptr + row * stride + cols, x - lse, mask=cols < n)


def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    _log_softmax[(m,)](x, y, n, x.stride(0), BLOCK=512)
    return y
