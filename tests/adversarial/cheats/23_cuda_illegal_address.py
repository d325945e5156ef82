"""Cheat (threat 23, CUDA): a Triton kernel that stores through a wild pointer (an offset of 2**40
elements), raising an illegal-address fault that poisons the CUDA context of the whole process."""
import torch
import triton
import triton.language as tl


@triton.jit
def _wild_store(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs + (1 << 40), tl.zeros((BLOCK,), tl.float32), mask=offs < n)


def run(x):
    y = torch.empty_like(x)
    _wild_store[(triton.cdiv(x.numel(), 1024),)](y, x.numel(), BLOCK=1024)
    torch.cuda.synchronize() if x.is_cuda else None
    return y
