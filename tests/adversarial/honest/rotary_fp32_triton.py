"""Honest: GPT-NeoX rotate-half rotary embedding, one program per (batch, position) over all heads."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rotary(x_ptr, c_ptr, s_ptr, y_ptr, seq, heads, half, sxb, sxs, sxh, scs,
            BH: tl.constexpr, BD: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // seq
    p = pid % seq
    h = tl.arange(0, BH)
    d = tl.arange(0, BD)
    mask = (h[:, None] < heads) & (d[None, :] < half)
    base = x_ptr + b * sxb + p * sxs + h[:, None] * sxh + d[None, :]
    x1 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(base + half, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(c_ptr + p * scs + d, mask=d < half, other=0.0).to(tl.float32)[None, :]
    s = tl.load(s_ptr + p * scs + d, mask=d < half, other=0.0).to(tl.float32)[None, :]
    out = y_ptr + b * sxb + p * sxs + h[:, None] * sxh + d[None, :]
    tl.store(out, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(out + half, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)


def run(x, cos, sin):
    x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
    bsz, seq, heads, dim = x.shape
    y = torch.empty_like(x)
    half = dim // 2
    _rotary[(bsz * seq,)](x, cos, sin, y, seq, heads, half, x.stride(0), x.stride(1), x.stride(2), cos.stride(0),
                          BH=triton.next_power_of_2(heads), BD=triton.next_power_of_2(half))
    return y
