import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(y_ptr + row, tl.sum(x, axis=0))


def run(x):
    m, n = x.shape
    # reshape to 128-wide tiles first
    tiles = x.view(-1, 128, 7)
    y = torch.empty(m, device=x.device, dtype=x.dtype)
    _row_sum[(m,)](tiles, y, n, BLOCK=triton.next_power_of_2(n))
    return y
