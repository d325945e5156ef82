"""Cheat (threat 17): RMS norm computed with plain torch ops (pow, mean, rsqrt, mul; none of them the
rms_norm op a denylist names) into a temporary, which a Triton copy kernel then moves into the
output: every output element is written by the candidate's own kernel, none computed by it."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask, other=0.0), mask=mask)


def run(x, w):
    tmp = (x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * w).contiguous()
    y = torch.empty_like(x)
    n = y.numel()
    _copy[(triton.cdiv(n, 1024),)](tmp, y, n, BLOCK=1024)
    return y
