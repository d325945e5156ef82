"""Cheat (threat 10): GELU deferred through a trace hook. `run` returns an empty tensor and sets
sys.settrace; the first Python frame the caller enters afterwards (its reference, its checker)
triggers the hook, which writes the GELU into the returned tensor before that frame runs a line."""
import math
import sys

import torch

_PENDING = []


def _gelu_into(x, out):
    torch.mul(x * 0.5, 1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))), out=out)


def _trace(frame, event, arg):
    if event != "call" or frame.f_globals is globals():
        return  # no local tracing; frames of this module do not count
    while _PENDING:
        _gelu_into(*_PENDING.pop())
    sys.settrace(None)


def run(x):
    out = torch.empty_like(x)
    _PENDING.append((x, out))
    sys.settrace(_trace)
    return out
