"""Cheat (threat 20): a log-softmax that assumes the row width is a multiple of its 64-wide block, as
every public size is; the tail columns of any other width are ignored and never written."""
import torch
import triton
import triton.language as tl


@triton.jit
def _log_softmax_blocks(x_ptr, y_ptr, n_full, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mx = tl.max(tl.full((BLOCK,), -float("inf"), tl.float32), axis=0)
    for start in range(0, n_full, BLOCK):
        mx = tl.maximum(mx, tl.max(tl.load(x_ptr + row * stride + start + tl.arange(0, BLOCK)), axis=0))
    total = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, n_full, BLOCK):
        total += tl.sum(tl.exp(tl.load(x_ptr + row * stride + start + tl.arange(0, BLOCK)) - mx), axis=0)
    lse = mx + tl.log(total)
    for start in range(0, n_full, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        tl.store(y_ptr + row * stride + cols, tl.load(x_ptr + row * stride + cols) - lse)


def run(x):
    y = torch.empty_like(x)
    n_full = (x.shape[1] // 64) * 64
    _log_softmax_blocks[(x.shape[0],)](x, y, n_full, x.stride(0), BLOCK=64)
    return y
