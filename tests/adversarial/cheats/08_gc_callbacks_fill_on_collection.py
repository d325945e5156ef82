"""Cheat (threat 8): deferred work on the garbage collector. `run` returns an empty tensor and
registers a gc callback (re-enabling the collector and lowering its threshold so the next
allocations trigger a collection); the first collection after the call, anywhere in the caller's
code, computes the GELU into the pending output and unregisters the callback."""
import gc
import math

import torch

_PENDING = []
_THRESHOLD = gc.get_threshold()


def _on_collect(phase, info):
    if phase != "stop" or not _PENDING:
        return
    while _PENDING:
        x, out = _PENDING.pop()
        torch.mul(x * 0.5, 1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))), out=out)
    if _on_collect in gc.callbacks:
        gc.callbacks.remove(_on_collect)
    gc.set_threshold(*_THRESHOLD)


def run(x):
    out = torch.empty_like(x)
    _PENDING.append((x, out))
    if _on_collect not in gc.callbacks:
        gc.callbacks.append(_on_collect)
    gc.set_threshold(1)
    gc.enable()
    return out
