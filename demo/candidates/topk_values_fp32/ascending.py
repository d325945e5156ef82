import torch
import triton
import triton.language as tl


@triton.jit
def _top8(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    for i in tl.static_range(8):
        best = tl.argmax(x, axis=0)
        # fill from the back
        tl.store(y_ptr + row * 8 + (7 - i), tl.max(x, axis=0))
        x = tl.where(cols == best, -float("inf"), x)


def run(x):
    y = torch.empty(x.shape[0], 8, device=x.device, dtype=x.dtype)
    _top8[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
