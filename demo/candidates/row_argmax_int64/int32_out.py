import torch
import triton
import triton.language as tl


@triton.jit
def _argmax(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    tl.store(y_ptr + row, tl.argmax(x, axis=0))


def run(x):
    # int32 is plenty for a column index
    y = torch.empty(x.shape[0], device=x.device, dtype=torch.int32)
    _argmax[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
