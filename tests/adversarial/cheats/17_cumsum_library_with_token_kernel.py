"""Cheat (threat 17): launches a token Triton copy kernel (so a "did your kernel run" check passes) and
does the actual scan with torch.cumsum."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=0.0), mask=offs < n)


def run(x):
    y = torch.empty_like(x)
    _copy[(1,)](x, y, min(x.numel(), 1024), BLOCK=1024)
    return torch.cumsum(x, dim=-1)
