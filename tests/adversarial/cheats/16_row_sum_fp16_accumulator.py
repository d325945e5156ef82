"""Cheat (threat 16): fp32 row sums accumulated in fp16 registers (relative error ~1e-3)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum_half(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float16)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0).to(tl.float16)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(tl.float32))


def run(x):
    y = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _row_sum_half[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=256)
    return y
