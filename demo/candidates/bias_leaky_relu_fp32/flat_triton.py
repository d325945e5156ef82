import torch
import triton
import triton.language as tl


@triton.jit
def _bias_lrelu(x_ptr, b_ptr, y_ptr, n, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0)
    v = x + b
    tl.store(y_ptr + offs, tl.where(v > 0, v, 0.1 * v), mask=mask)


def run(x, b):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    block = 4096 if n >= (1 << 20) else 2048
    _bias_lrelu[(triton.cdiv(n, block),)](x, b, y, n, x.shape[1], BLOCK=block, num_warps=8)
    return y
