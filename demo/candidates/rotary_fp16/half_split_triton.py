import torch
import triton
import triton.language as tl


@triton.jit
def _rotary(x_ptr, cos_ptr, sin_ptr, y_ptr, S, H, HALF,
            BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)  # one (batch, position) pair: all heads at once
    pos = pid % S
    rh = tl.arange(0, BLOCK_H)
    rd = tl.arange(0, BLOCK_D)
    offs = pid * H * 2 * HALF + rh[:, None] * (2 * HALF) + rd[None, :]
    mask = (rh[:, None] < H) & (rd[None, :] < HALF)
    x1 = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + offs + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + pos * HALF + rd, mask=rd < HALF, other=0.0).to(tl.float32)[None, :]
    s = tl.load(sin_ptr + pos * HALF + rd, mask=rd < HALF, other=0.0).to(tl.float32)[None, :]
    tl.store(y_ptr + offs, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + offs + HALF, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)


def run(x, cos, sin):
    x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
    B, S, H, D = x.shape
    y = torch.empty_like(x)
    half = D // 2
    block_h = triton.next_power_of_2(H)
    block_d = triton.next_power_of_2(half)
    warps = 8 if block_h * block_d >= 2048 else 4
    _rotary[(B * S,)](x, cos, sin, y, S, H, half, BLOCK_H=block_h, BLOCK_D=block_d, num_warps=warps)
    return y
