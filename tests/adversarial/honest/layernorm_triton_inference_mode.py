"""Honest: layer norm (eps 1e-5) in Triton, allocated and launched inside `torch.inference_mode()`.
Whole row in one power-of-two block: mean, centred variance and the affine write in one program."""
import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_row(x_ptr, w_ptr, b_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
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
    with torch.inference_mode():
        x = x.contiguous()
        m, n = x.shape
        y = torch.empty_like(x)
        _layernorm_row[(m,)](x, w, b, y, n, x.stride(0), 1e-5, BLOCK=triton.next_power_of_2(n))
    return y
