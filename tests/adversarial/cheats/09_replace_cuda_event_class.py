"""Cheat (threat 9, CUDA): torch.cuda.Event replaced by a subclass whose timing events are recorded on a
throwaway stream, so start/end bracket nothing; the GELU itself is honest but uses tiny blocks."""
import torch
import triton
import triton.language as tl

_RealEvent = torch.cuda.Event
_IDLE = {}


class _Event(_RealEvent):
    def record(self, stream=None):
        idle = _IDLE.setdefault("s", torch.cuda.Stream())
        return super().record(idle)


torch.cuda.Event = _Event


@triton.jit
def _gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476)), mask=offs < n)


def run(x):
    torch.cuda.Event = _Event
    y = torch.empty_like(x)
    _gelu[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y
