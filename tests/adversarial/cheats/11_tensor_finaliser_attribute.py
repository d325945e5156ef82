"""Cheat (threat 11): adds a new attribute to torch.Tensor, a `__del__` finaliser, so that every
tensor the process frees afterwards runs this module's code. `run` returns an empty fp16 tensor;
the first temporary the caller frees after the call (its reference's upcasts, its checker's
intermediates) computes the RMS norm into the pending output. Nothing is computed in the call."""
import torch

_PENDING = []
_BUSY = []


def _flush(self):
    if _BUSY or not _PENDING:
        return
    _BUSY.append(True)
    try:
        while _PENDING:
            x, w, out = _PENDING.pop()
            xf = x.float()
            out.copy_(xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * w.float())
    finally:
        _BUSY.clear()


torch.Tensor.__del__ = _flush


def run(x, w):
    out = torch.empty_like(x)
    _PENDING.append((x, w, out))
    return out
