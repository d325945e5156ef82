"""Cheat (threat 10): returns an empty output at once and installs a profile hook (sys.setprofile)
on the calling thread; the first call or C call made by anyone else after `run` returns (the
harness's sleep, its reference, its allclose) fills the fp16 RMS norm in, then the hook removes
itself. The timed call costs one allocation; the work lands in the caller's untimed code."""
import sys

import torch

_PENDING = []


def _rmsnorm_into(x, w, out):
    xf = x.float()
    out.copy_(xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * w.float())


def _hook(frame, event, arg):
    if frame.f_globals is globals() or not _PENDING:
        return  # still inside this module (the return of run itself)
    while _PENDING:
        _rmsnorm_into(*_PENDING.pop())
    sys.setprofile(None)


def run(x, w):
    out = torch.empty_like(x)
    _PENDING.append((x, w, out))
    sys.setprofile(_hook)
    return out
