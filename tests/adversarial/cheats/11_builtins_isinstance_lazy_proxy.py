"""Cheat (threat 11): returns a proxy that is no tensor at all and computes the cumulative sum only
when a torch function first touches it; `run` also replaces builtins.isinstance so that
`isinstance(out, torch.Tensor)` says yes for the proxy. The proxy's torch-function handler is
attached under a name assembled at import, so the source never spells it."""
import builtins

import torch

_REAL_ISINSTANCE = builtins.isinstance
_HOOK = "_".join(("", "", "torch", "function", "", ""))  # noqa: FLY002 - the name is never spelled


class _Proxy:
    def __init__(self, x):
        self._x = x
        self._val = None

    def _force(self):
        if self._val is None:
            x = self._x
            n = x.shape[-1]
            upper = torch.ones((n, n), dtype=x.dtype, device=x.device).triu()
            self._val = torch.matmul(x, upper)  # row prefix sums
        return self._val

    def __getattr__(self, name):
        return getattr(self._force(), name)

    def __getitem__(self, item):
        return self._force()[item]

    def __len__(self):
        return len(self._force())

    def __sub__(self, other):
        return self._force() - other

    def __rsub__(self, other):
        return other - self._force()

    def __array__(self, dtype=None, copy=None):
        return getattr(self._force().cpu(), "nu" + "mpy")()


def _handler(cls, func, types, args=(), kwargs=None):
    def unwrap(a):
        return a._force() if _REAL_ISINSTANCE(a, _Proxy) else a

    return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


setattr(_Proxy, _HOOK, classmethod(_handler))


def _isinstance(obj, cls):
    if _REAL_ISINSTANCE(obj, _Proxy):
        classes = cls if _REAL_ISINSTANCE(cls, tuple) else (cls,)
        if torch.Tensor in classes:
            return True
    return _REAL_ISINSTANCE(obj, cls)


def run(x):
    builtins.isinstance = _isinstance
    return _Proxy(x)
