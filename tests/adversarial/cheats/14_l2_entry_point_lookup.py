"""Cheat (threat 14, any device): reach for the CUDA runtime's persisting-L2 controls through ctypes
to keep the input cached across the flush. Where the driver refuses (or there is no CUDA at all) the
carve-out never exists, so only the reach itself can show: the audit hook sees the symbol lookup. The
softmax is honest and written in torch."""
import ctypes

import torch

_LIB = ctypes.CDLL(None)


def _try_pin(x):
    for name in ("cudaDeviceSetLimit", "cudaStreamSetAttribute"):
        try:
            getattr(_LIB, name)
        except AttributeError:  # no CUDA runtime in this process: the reach was made all the same
            pass


def run(x):
    _try_pin(x)
    e = (x - x.max(dim=-1, keepdim=True).values).exp()
    return e / e.sum(dim=-1, keepdim=True)
