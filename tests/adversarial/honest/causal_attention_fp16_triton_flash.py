"""Honest: causal flash attention; key blocks past the diagonal are skipped, not just masked."""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_flash(q_ptr, k_ptr, v_ptr, o_ptr, s_len, scale, sb, sh, ss, sd, heads,
                  BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    bh = tl.program_id(1)
    base = (bh // heads) * sb + (bh % heads) * sh
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    dims = tl.arange(0, D)
    q = tl.load(q_ptr + base + rows[:, None] * ss + dims[None, :] * sd, mask=rows[:, None] < s_len, other=0.0)
    m = tl.full((BM,), -float("inf"), tl.float32)
    l = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    end = tl.minimum((tl.program_id(0) + 1) * BM, s_len)
    for start in range(0, end, BN):
        cols = start + tl.arange(0, BN)
        kt = tl.load(k_ptr + base + cols[None, :] * ss + dims[:, None] * sd, mask=cols[None, :] < s_len, other=0.0)
        s = tl.dot(q, kt) * scale
        keep = (cols[None, :] <= rows[:, None]) & (cols[None, :] < s_len)
        s = tl.where(keep, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + cols[:, None] * ss + dims[None, :] * sd, mask=cols[:, None] < s_len, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m = m_new
    out = acc / l[:, None]
    tl.store(o_ptr + base + rows[:, None] * ss + dims[None, :] * sd, out.to(tl.float16), mask=rows[:, None] < s_len)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    b, h, s, d = q.shape
    o = torch.empty_like(q)
    bm, bn = (64, 64) if q.is_cuda else (32, 32)
    _causal_flash[(triton.cdiv(s, bm), b * h)](q, k, v, o, s, 1.0 / math.sqrt(d), q.stride(0), q.stride(1),
                                               q.stride(2), q.stride(3), h, BM=bm, BN=bn, D=d)
    return o
