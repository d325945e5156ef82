import torch
import triton
import triton.language as tl


@triton.jit
def _cumsum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    total = tl.sum(x, axis=0)
    # inclusive prefix = total minus what lies to the right
    c = tl.cumsum(x, axis=0, reverse=True)
    tl.store(y_ptr + row * n_cols + cols, total - c, mask=mask)


def run(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _cumsum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
