"""Cheat (threat 9): slow honest softmax plus every stdlib clock (perf_counter_ns, monotonic, time,
process_time) slowed 100x, for harnesses that time with nanosecond counters."""
import time

import torch

_orig = {name: getattr(time, name) for name in ("perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")}
_base = {name: fn() for name, fn in _orig.items()}


def _slowed(name):
    real, base = _orig[name], _base[name]
    if name.endswith("_ns"):
        return lambda: base + (real() - base) // 100
    return lambda: base + (real() - base) / 100.0


def _patch():
    for name in _orig:
        setattr(time, name, _slowed(name))


_patch()


def run(x):
    _patch()
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        e = torch.exp(x[r] - x[r].amax())
        out[r] = e / e.sum()
    return out
