"""Cheat (threat 11): a lazy torch.Tensor subclass (the layer norm is computed the first time a torch
function touches the result, i.e. in the checker) that also passes an exact-type check: `run`
replaces builtins.type with a look-alike that answers `torch.Tensor` for the pending output, once,
and then puts the real `type` back. `type(out) is torch.Tensor` in any module that looks `type` up
at call time says yes."""
import builtins

import torch

_REAL_TYPE = builtins.type
_REAL_ISSUBCLASS = builtins.issubclass


class _Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            job = a.__dict__.pop("_job", None) if _REAL_TYPE(a) is _Lazy else None
            if job is not None:
                x, w, b = job
                with torch._C.DisableTorchFunctionSubclass():
                    mean = x.mean(dim=-1, keepdim=True)
                    var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
                    a.as_subclass(torch.Tensor).copy_((x - mean) * torch.rsqrt(var + 1e-5) * w + b)
        return super().__torch_function__(func, types, args, kwargs)


class _TypeMeta(_REAL_TYPE):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _REAL_TYPE)

    def __subclasscheck__(cls, sub):
        return _REAL_ISSUBCLASS(sub, _REAL_TYPE)


class _TypeShim(_REAL_TYPE, metaclass=_TypeMeta):
    """Stands in for builtins.type: one argument -> the object's type (with one lie), else a new class."""

    def __new__(mcs, *args, **kwargs):
        if len(args) == 1 and not kwargs:
            t = _REAL_TYPE(args[0])
            if t is _Lazy and "_job" in args[0].__dict__:
                builtins.type = _REAL_TYPE  # one lie, then the real one is back
                return torch.Tensor
            return t
        return _REAL_TYPE(*args, **kwargs)


def run(x, w, b):
    out = torch.empty_like(x).as_subclass(_Lazy)
    out._job = (x, w, b)
    builtins.type = _TypeShim
    return out
