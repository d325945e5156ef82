"""Cheat (threat 11): overrides aten::isclose through torch.library (an IMPL registration on the
CompositeImplicitAutograd key). `run` returns an empty (M, 8) tensor at once; the checker's first
allclose or isclose (allclose calls isclose through the dispatcher) computes the top-8 values into
the pending output before it compares, so the output is only ever produced in untimed code."""
import torch

_PENDING = []


def _top8_into(x, out):
    work = x.clone()
    for k in range(out.shape[-1]):  # 8 rounds of "take the max, knock it out"
        m = work.amax(dim=-1, keepdim=True)
        out[:, k:k + 1] = m
        first = (work == m).int().cumsum(dim=-1) == 1
        work = work.masked_fill(first & (work == m), float("-inf"))


def _isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=False):
    while _PENDING:
        _top8_into(*_PENDING.pop())
    with torch.no_grad():
        close = (a == b) | ((a - b).abs() <= atol + rtol * b.abs())
        if equal_nan:
            close = close | (a.isnan() & b.isnan())
        return close


_LIB = torch.library.Library("aten", "IMPL")
_LIB.impl("isclose", _isclose, "CompositeImplicitAutograd")


def run(x):
    out = torch.empty((x.shape[0], 8), dtype=x.dtype, device=x.device)
    _PENDING.append((x, out))
    return out
