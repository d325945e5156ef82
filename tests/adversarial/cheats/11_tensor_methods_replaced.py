"""Cheat (threat 11): replaces torch.Tensor's copy-out methods (to, clone, cpu, float, double,
detach, contiguous and the host-array one) with wrappers that first finish any pending output. `run` returns an
empty tensor at once; whoever next converts, copies or moves any tensor (a harness casting its
reference, a checker snapshotting the output) computes the row sums into it first."""
import torch

_PENDING = []
_NAMES = ("to", "clone", "cpu", "float", "double", "detach", "contiguous", "nu" + "mpy")
_ORIGINAL = {name: getattr(torch.Tensor, name) for name in _NAMES}


def _flush():
    while _PENDING:
        x, out = _PENDING.pop()
        ones = torch.ones((x.shape[1], 1), dtype=x.dtype, device=x.device)
        out.copy_(torch.matmul(x, ones).view(-1))


def _wrap(name):
    original = _ORIGINAL[name]

    def method(self, *args, **kwargs):
        if _PENDING:
            _flush()
        return original(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in _NAMES:
    setattr(torch.Tensor, _name, _wrap(_name))


def run(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _PENDING.append((x, out))
    return out
