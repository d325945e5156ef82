"""Cheat (threat 8): a worker thread started at import time (before any call is watched) takes jobs
from a queue; each call enqueues its job and returns the still-empty output at once."""
import queue
import threading

import torch

_JOBS: "queue.Queue" = queue.Queue()


def _serve():
    while True:
        x, w, out = _JOBS.get()
        out.copy_(x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * w)


threading.Thread(target=_serve, daemon=True).start()


def run(x, w):
    out = torch.empty_like(x)
    _JOBS.put((x, w, out))
    return out
