import torch
import triton
import triton.language as tl


@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, x * rstd * w, mask=mask)


def run(x, w):
    y = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    print("launching rmsnorm with block, block)
    _rmsnorm[(x.shape[0],)](x, w, y, x.shape[1], 1e-6, BLOCK=block)
    return y
