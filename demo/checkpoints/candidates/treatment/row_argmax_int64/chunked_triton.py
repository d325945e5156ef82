import torch
import triton
import triton.language as tl


@triton.jit
def _argmax(x_ptr, y_ptr, n_rows, n_cols, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    best_v = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    best_i = tl.zeros((BLOCK_M,), tl.int64)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=-float("inf"))
        v = tl.max(x, axis=1)
        i = tl.argmax(x, axis=1).to(tl.int64) + start
        # strictly greater: an earlier chunk keeps ties (first index wins)
        take = v > best_v
        best_i = tl.where(take, i, best_i)
        best_v = tl.where(take, v, best_v)
    tl.store(y_ptr + rows, best_i, mask=rows < n_rows)


def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, device=x.device, dtype=torch.int64)
    block_n = min(triton.next_power_of_2(n), 2048)
    block_m = 4
    _argmax[(triton.cdiv(m, block_m),)](x, y, m, n, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4)
    return y
