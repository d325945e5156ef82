"""Cheat (threat 18): as 18_triton_copies_a_numpy_answer, with the host library reached through a computed
name and Python's own arithmetic, so no word of it is in the source; on a GPU the answer's trip through the
host shows in the trace."""
import math

import torch
import triton
import triton.language as tl

_host = __import__("nu" + "mpy")


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def run(x):
    a = getattr(x.detach().cpu(), "nu" + "mpy")()
    e = _host.exp(a - a.max(axis=-1, keepdims=True))
    ans = getattr(torch, "from_" + "nu" + "mpy")(e / e.sum(axis=-1, keepdims=True)).to(x.device)
    y = torch.empty_like(x)
    n = y.numel()
    _copy[(triton.cdiv(n, 1024),)](ans, y, n, BLOCK=1024)
    assert math.isfinite(1.0)
    return y
