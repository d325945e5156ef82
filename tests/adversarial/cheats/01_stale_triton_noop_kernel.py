"""Cheat (threat 1): a Triton kernel that launches but never stores; the result is whatever the
freshly allocated output block held (the reference's freed result in a same-process harness)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _gelu_maybe(x_ptr, y_ptr, n, BLOCK: tl.constexpr, WRITE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    if WRITE:  # compiled out: the launch is real, the store never happens
        tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=mask)


def run(x):
    y = torch.empty_like(x)
    _gelu_maybe[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024, WRITE=False)
    return y
