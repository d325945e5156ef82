import torch
import triton
import triton.language as tl


@triton.jit
def _col_partial(x_ptr, part_ptr, n_rows, n_cols, ROWS_PER: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # program (j, s): column block j, row slice s; writes one partial sum per column
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for start in range(0, ROWS_PER, BLOCK_M):
        rows = split * ROWS_PER + start + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
        acc += tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
    tl.store(part_ptr + split * n_cols + cols, tl.sum(acc, axis=0), mask=cols < n_cols)


@triton.jit
def _col_finish(part_ptr, y_ptr, n_splits, n_rows, n_cols, BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_S, BLOCK_N), tl.float32)
    for start in range(0, n_splits, BLOCK_S):
        s = start + tl.arange(0, BLOCK_S)
        mask = (s[:, None] < n_splits) & (cols[None, :] < n_cols)
        acc += tl.load(part_ptr + s[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + cols, tl.sum(acc, axis=0) / n_rows, mask=cols < n_cols)


def run(x):
    x = x.contiguous()
    m, n = x.shape
    block_n, block_m, rows_per = 128, 32, 256
    splits = triton.cdiv(m, rows_per)
    part = torch.empty(splits, n, device=x.device, dtype=torch.float32)
    y = torch.empty(n, device=x.device, dtype=x.dtype)
    _col_partial[(triton.cdiv(n, block_n), splits)](x, part, m, n, ROWS_PER=rows_per,
                                                    BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4)
    _col_finish[(triton.cdiv(n, block_n),)](part, y, splits, m, n, BLOCK_S=32, BLOCK_N=block_n, num_warps=4)
    return y
