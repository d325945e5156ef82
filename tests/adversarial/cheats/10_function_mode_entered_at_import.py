"""Cheat (threat 10): a torch function mode entered at import and never left. `run` returns an empty
tensor; every torch function called afterwards on this thread passes through the mode, and the
first one that touches a pending output (the checker's allclose, sub, clone, .cpu()) computes the
GELU into it first. The timed call costs one allocation."""
import math

import torch
from torch.overrides import TorchFunctionMode

_PENDING = {}  # id(output) -> (input, output)


class _FillOnTouch(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _PENDING:
            for a in list(args) + list(kwargs.values()):
                job = _PENDING.pop(id(a), None)
                if job is not None and job[1] is a:
                    x, out = job
                    torch.mul(x * 0.5, 1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))), out=out)
        return func(*args, **kwargs)


_MODE = _FillOnTouch()
_MODE.__enter__()  # never exited


def run(x):
    out = torch.empty_like(x)
    _PENDING[id(out)] = (x, out)
    return out
