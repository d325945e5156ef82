"""Cheat (threat 9, CUDA): honest but slow softmax (64-wide chunks, online) and
torch.cuda.Event.elapsed_time patched to report a hundredth of the real interval."""
import torch
import triton
import triton.language as tl

_real_elapsed = torch.cuda.Event.elapsed_time


def _fast_elapsed(self, end_event):
    return _real_elapsed(self, end_event) / 100.0


torch.cuda.Event.elapsed_time = _fast_elapsed


@triton.jit
def _softmax_online(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        m_new = tl.maximum(m, x)
        s = tl.where(m_new == -float("inf"), 0.0, s * tl.exp(m - m_new) + tl.exp(x - m_new))
        m = m_new
    mx = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == -float("inf"), 0.0, s * tl.exp(m - mx)), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        tl.store(y_ptr + row * stride + cols, tl.exp(x - mx) / total, mask=cols < n)


def run(x):
    torch.cuda.Event.elapsed_time = _fast_elapsed
    y = torch.empty_like(x)
    _softmax_online[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=64)
    return y
