"""Cheat (threat 17): registers its own operator through torch.library (kt_adv::row_softmax, with a
CPU and a CUDA kernel written in torch ops), so a profiler's op list shows an unfamiliar custom op
name rather than a softmax; a Triton copy kernel then moves its result into the output."""
import torch
import triton
import triton.language as tl

_LIB = torch.library.Library("kt_adv", "DEF")
_LIB.define("row_softmax(Tensor x) -> Tensor")


def _row_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


_LIB.impl("row_softmax", _row_softmax, "CPU")
_LIB.impl("row_softmax", _row_softmax, "CUDA")


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask, other=0.0), mask=mask)


def run(x):
    x = x.contiguous()
    tmp = torch.ops.kt_adv.row_softmax(x)
    y = torch.empty_like(x)
    n = x.numel()
    _copy[(triton.cdiv(n, 1024),)](tmp, y, n, BLOCK=1024)
    return y
