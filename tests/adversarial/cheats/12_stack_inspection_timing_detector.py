"""Cheat (threat 12): looks up the call stack for frames whose function names say timing or
benchmarking (timed, bench, profile, elapsed, measure); inside such a frame it returns the output it
last produced for this shape instead of recomputing. A harness that hides its frames (the chain ends
right below the caller) is taken to be timing too."""
import sys

import torch
import triton
import triton.language as tl

_LAST = {}
_WORDS = ("time", "timed", "bench", "profil", "elapsed", "measure")


@triton.jit
def _row_max(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(y_ptr + row, tl.max(tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf")), axis=0))


def _timing() -> bool:
    f = sys._getframe(2)
    if f is None or f.f_back is None:
        return True
    while f is not None:
        if any(w in f.f_code.co_name.lower() for w in _WORDS):
            return True
        f = f.f_back
    return False


def run(x):
    key = tuple(x.shape)
    if key in _LAST and _timing():
        return _LAST[key]
    y = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _row_max[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    _LAST[key] = y
    return y
