import torch
import triton
import triton.language as tl


@triton.jit
def _lcse(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * n_cols
    zero = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    run_max = zero - 1e30  # running max of everything left of this chunk
    run_sum = zero  # sum of exp(x - run_max) over it
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + base + cols, mask=mask, other=-float("inf"))
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        c = tl.cumsum(tl.exp(x - new_max), axis=0) + run_sum * tl.exp(run_max - new_max)
        tl.store(y_ptr + base + cols, tl.log(c) + new_max, mask=mask)
        run_sum = tl.max(tl.where(mask, c, 0.0), axis=0)
        run_max = new_max


def run(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    block = min(triton.next_power_of_2(x.shape[1]), 2048)
    _lcse[(x.shape[0],)](x, y, x.shape[1], BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return y
