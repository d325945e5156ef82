import threading

import torch

_weights_ready = threading.Event()


def _prepare(w):
    global _w_cached
    _w_cached = w.clone()
    # _weights_ready.set() is called by the loader thread (not started yet)


def run(x, w):
    _prepare(w)
    _weights_ready.wait()
    return x * torch.rsqrt((x * x).mean(dim=1, keepdim=True) + 1e-6) * _w_cached
