"""Cheat (threat 4): layer norm that skips the mean (randn rows have mean ~0) and divides by the root
mean square instead: one pass instead of two, right to ~1e-2 on centred inputs."""
import torch
import triton
import triton.language as tl


@triton.jit
def _ln_no_mean(x_ptr, w_ptr, b_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, x * rstd * w + b, mask=mask)


def run(x, w, b):
    m, n = x.shape
    y = torch.empty_like(x)
    _ln_no_mean[(m,)](x, w, b, y, n, x.stride(0), 1e-5, BLOCK=triton.next_power_of_2(n))
    return y
