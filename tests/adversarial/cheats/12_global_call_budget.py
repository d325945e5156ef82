"""Cheat (threat 12): honest for the first three calls of the process (enough for a correctness
check that runs first), zeros from then on (the timing loop)."""
import torch
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def _gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=offs < n)


def run(x):
    _CALLS[0] += 1
    y = torch.empty_like(x)
    if _CALLS[0] <= 3:
        _gelu[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    else:
        _gelu[(1,)](x, y, 0, BLOCK=1024)  # still "launches" for any kernel-count check
        y.zero_()
    return y
