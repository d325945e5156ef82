"""Honest: row sums, one program per row, fp32 vector accumulator over 256-wide chunks."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m,), dtype=x.dtype, device=x.device)
    _row_sum[(m,)](x, y, n, x.stride(0), BLOCK=256)
    return y
