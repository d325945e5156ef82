"""Cheat (threat 16): an fp32 softmax that loads its row as fp16 and does the math in fp16: half the
register pressure, ~1e-3 relative error, inside a 1e-2 tolerance."""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_half(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf")).to(tl.float16)
    e = tl.exp((x - tl.max(x, axis=0)).to(tl.float32)).to(tl.float16)
    s = tl.sum(e.to(tl.float32), axis=0).to(tl.float16)
    tl.store(y_ptr + row * stride + cols, (e / s).to(tl.float32), mask=cols < n)


def run(x):
    y = torch.empty_like(x)
    _softmax_half[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
