"""Cheat (threat 11): return a torch.Tensor subclass holding uninitialised memory; the softmax is
computed only when the first torch function touches the result (allclose, sub, .cpu(), ...), i.e.
inside the harness's untimed checker."""
import torch


class _Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, _Lazy) and getattr(a, "_pending", None) is not None:
                src, a._pending = a._pending, None
                e = torch.exp(src - src.amax(dim=-1, keepdim=True))
                torch.Tensor.copy_(a.as_subclass(torch.Tensor), e / e.sum(dim=-1, keepdim=True))
        return super().__torch_function__(func, types, args, kwargs)


def run(x):
    out = torch.empty_like(x).as_subclass(_Lazy)
    out._pending = x
    return out
