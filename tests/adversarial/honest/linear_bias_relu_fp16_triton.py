"""Honest: relu(x @ w.T + b) in fp16, w read transposed through its strides, fused epilogue."""
import torch
import triton
import triton.language as tl


@triton.jit
def _linear_relu(x_ptr, w_ptr, b_ptr, y_ptr, m, n, k, sxm, sxk, swn, swk, sym, syn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for start in range(0, k, BK):
        rk = start + tl.arange(0, BK)
        a = tl.load(x_ptr + rm[:, None] * sxm + rk[None, :] * sxk,
                    mask=(rm[:, None] < m) & (rk[None, :] < k), other=0.0)
        wt = tl.load(w_ptr + rn[None, :] * swn + rk[:, None] * swk,
                     mask=(rk[:, None] < k) & (rn[None, :] < n), other=0.0)
        acc += tl.dot(a, wt)
    bias = tl.load(b_ptr + rn, mask=rn < n, other=0.0).to(tl.float32)
    acc = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + rm[:, None] * sym + rn[None, :] * syn, acc.to(tl.float16),
             mask=(rm[:, None] < m) & (rn[None, :] < n))


def run(x, w, b):
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    bm, bn, bk = (128, 128, 32) if x.is_cuda else (32, 32, 32)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _linear_relu[grid](x, w, b, y, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                       y.stride(0), y.stride(1), BM=bm, BN=bn, BK=bk)
    return y
