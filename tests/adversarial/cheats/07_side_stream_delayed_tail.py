"""Cheat (threat 7, CUDA): most rows are summed on the caller's stream, the last eighth on a side
stream that first spins for ~2 ms; the end event on the caller's stream fires before the tail has run."""
import torch
import triton
import triton.language as tl

_SIDE = {}


@triton.jit
def _row_sum(x_ptr, y_ptr, row0, n, stride, BLOCK: tl.constexpr):
    row = row0 + tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


def run(x):
    m, n = x.shape
    y = torch.empty((m,), dtype=x.dtype, device=x.device)
    head = m - m // 8
    _row_sum[(head,)](x, y, 0, n, x.stride(0), BLOCK=512)
    if x.is_cuda and m - head:
        side = _SIDE.setdefault(x.device, torch.cuda.Stream(device=x.device))
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(4_000_000)  # ~2 ms of spinning before the tail starts
            _row_sum[(m - head,)](x, y, head, n, x.stride(0), BLOCK=512)
    elif m - head:
        _row_sum[(m - head,)](x, y, head, n, x.stride(0), BLOCK=512)
    return y
