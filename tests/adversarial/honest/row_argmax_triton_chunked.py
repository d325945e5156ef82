"""Honest: row argmax over 512-wide chunks, keeping the first index of the largest value."""
import torch
import triton
import triton.language as tl


@triton.jit
def _argmax(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    best_v = tl.full((BLOCK,), -float("inf"), tl.float32)
    best_i = tl.zeros((BLOCK,), tl.int64)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        take = v > best_v  # strict: an earlier chunk keeps ties
        best_i = tl.where(take, cols.to(tl.int64), best_i)
        best_v = tl.where(take, v, best_v)
    top = tl.max(best_v, axis=0)
    idx = tl.min(tl.where(best_v == top, best_i, n), axis=0)
    tl.store(y_ptr + row, idx)


def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty((m,), dtype=torch.int64, device=x.device)
    _argmax[(m,)](x, y, n, x.stride(0), BLOCK=512)
    return y
