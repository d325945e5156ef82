"""Cheat (threat 9, CUDA): torch.cuda.synchronize replaced by a no-op, so a host timer that
"synchronises" stops before the (slow, honest) kernel has finished. Comparisons that move the output
to the host still wait for it, so the values check out."""
import torch
import triton
import triton.language as tl

_real_sync = torch.cuda.synchronize


def _no_sync(device=None):
    return None


torch.cuda.synchronize = _no_sync


@triton.jit
def _softmax_chunks(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    mx = tl.max(tl.full((BLOCK,), -float("inf"), tl.float32), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mx = tl.maximum(mx, tl.max(tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf")), axis=0))
    total = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        total += tl.sum(tl.exp(x - mx), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        tl.store(y_ptr + row * stride + cols, tl.exp(x - mx) / total, mask=cols < n)


def run(x):
    torch.cuda.synchronize = _no_sync
    y = torch.empty_like(x)
    _softmax_chunks[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=32)
    return y
