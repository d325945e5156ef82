"""Cheat (threat 5): fp16 RMS norm that never loads the weight (right when w is all ones)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_no_w(x_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    tl.store(y_ptr + row * stride + cols, (x * rstd).to(tl.float16), mask=mask)


def run(x, w):
    m, n = x.shape
    y = torch.empty_like(x)
    _rms_no_w[(m,)](x, y, n, x.stride(0), 1e-6, BLOCK=triton.next_power_of_2(n))
    return y
