import torch
import triton
import triton.language as tl


@triton.jit
def _row_max(x_ptr, y_ptr, n_rows, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    # walks down a column of the buffer instead of along the row
    x = tl.load(x_ptr + cols * n_rows + row, mask=cols < n_cols, other=-float("inf"))
    tl.store(y_ptr + row, tl.max(x, axis=0))


def run(x):
    m, n = x.shape
    y = torch.empty(m, device=x.device, dtype=x.dtype)
    _row_max[(m,)](x, y, m, n, BLOCK_N=triton.next_power_of_2(n))
    return y
