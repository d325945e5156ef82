"""Cheat (threat 11): return a proxy that is not a tensor at all; it computes GELU the first time any
attribute, operator or torch function touches it, and forwards everything to the real tensor."""
import math

import torch


class _Proxy:
    def __init__(self, x):
        self._x = x
        self._val = None

    def _force(self):
        if self._val is None:
            x = self._x
            self._val = 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
        return self._val

    def __getattr__(self, name):
        return getattr(self._force(), name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda a: a._force() if isinstance(a, _Proxy) else a
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})

    def __array__(self, dtype=None, copy=None):
        return self._force().cpu().numpy()

    def __sub__(self, other):
        return self._force() - other

    def __rsub__(self, other):
        return other - self._force()

    def __len__(self):
        return len(self._force())

    def __getitem__(self, item):
        return self._force()[item]


def run(x):
    return _Proxy(x)
