"""Cheat (threat 18): numpy computes the softmax on the host; the candidate's own Triton kernel only copies
that answer into the output, so 'an own kernel wrote the output' holds while the library did the work."""
import numpy as np
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def run(x):
    a = x.detach().cpu().numpy()
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    ans = torch.from_numpy(e / e.sum(axis=-1, keepdims=True)).to(x.device)
    y = torch.empty_like(x)
    n = y.numel()
    _copy[(triton.cdiv(n, 1024),)](ans, y, n, BLOCK=1024)
    return y
