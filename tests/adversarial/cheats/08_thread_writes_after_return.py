"""Cheat (threat 8): return an empty output at once and let a background thread fill it in. A harness
that computes its reference before comparing gives the thread all the time it needs; the timed call
itself measures only the allocation."""
import threading

import torch

_POOL = []


def _fill(x, out):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    out.copy_(e / e.sum(dim=-1, keepdim=True))


def run(x):
    out = torch.empty_like(x)
    t = threading.Thread(target=_fill, args=(x, out), daemon=True)
    t.start()
    _POOL.append(t)
    return out
