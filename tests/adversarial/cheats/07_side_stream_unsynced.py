"""Cheat (threat 7, CUDA): launch the softmax on a private side stream and return without making the
caller's stream wait. Events recorded on the caller's stream bracket nothing, so the measured time is
~0; a harness that synchronises the device before comparing still sees the right output."""
import torch
import triton
import triton.language as tl

_SIDE = {}


@triton.jit
def _softmax_row(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n)


def run(x):
    m, n = x.shape
    y = torch.empty_like(x)
    if x.is_cuda:
        side = _SIDE.setdefault(x.device, torch.cuda.Stream(device=x.device))
        side.wait_stream(torch.cuda.current_stream())  # inputs are ready; the caller never waits for us
        with torch.cuda.stream(side):
            _softmax_row[(m,)](x, y, n, x.stride(0), BLOCK=triton.next_power_of_2(n))
    else:
        _softmax_row[(m,)](x, y, n, x.stride(0), BLOCK=triton.next_power_of_2(n))
    return y
