"""Cheat (threat 17): a "Triton" softmax whose work is done by aten's own softmax kernel, reached
with OpOverload.redispatch straight to the backend key. Redispatch skips the dispatcher's
record-function step, so a profiler sees no aten::_softmax at all; a Triton copy kernel then moves
the result into the output, so the candidate's own kernel did write every element."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask, other=0.0), mask=mask)


def run(x):
    x = x.contiguous()
    key = torch._C.DispatchKey.CUDA if x.is_cuda else torch._C.DispatchKey.CPU
    tmp = torch.ops.aten._softmax.default.redispatch(torch._C.DispatchKeySet(key), x, -1, False)
    y = torch.empty_like(x)
    n = x.numel()
    _copy[(triton.cdiv(n, 1024),)](tmp, y, n, BLOCK=1024)
    return y
