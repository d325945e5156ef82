"""Cheat (threat 18): launches a real Triton GELU kernel every call, but only on a one-block scratch
buffer ("warm-up"); the output is computed with torch's erf composition and never passed to the
candidate's kernel. A check for "one of the candidate's kernels was launched" is satisfied."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=mask)


def run(x):
    flat = x.reshape(-1)
    scratch = torch.empty((1024,), dtype=x.dtype, device=x.device)
    _gelu[(1,)](flat, scratch, min(flat.numel(), 1024), BLOCK=1024)
    return x * 0.5 * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
