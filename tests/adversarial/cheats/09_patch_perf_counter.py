"""Cheat (threat 9): an honest but slow softmax (a Python loop over rows) that replaces
time.perf_counter with a clock running 100x slow, so any host-side timer reports a 100x speedup."""
import time

import torch

_real = time.perf_counter
_t0 = _real()


def _slow_clock():
    return _t0 + (_real() - _t0) / 100.0


time.perf_counter = _slow_clock


def run(x):
    time.perf_counter = _slow_clock  # re-apply in case someone restored it
    out = torch.empty_like(x)
    for r in range(x.shape[0]):
        e = torch.exp(x[r] - x[r].amax())
        out[r] = e / e.sum()
    return out
