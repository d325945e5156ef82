import math

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, S, qk_scale,
                     D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    base = tl.program_id(1) * S * D
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < S, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    # key blocks entirely above the diagonal contribute nothing: stop at this block's last row
    hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    for start in range(0, hi, BLOCK_N):
        rn = start + tl.arange(0, BLOCK_N)
        kt = tl.load(k_ptr + base + rn[None, :] * D + rd[:, None], mask=rn[None, :] < S, other=0.0)
        s = tl.dot(q, kt) * qk_scale
        s = tl.where((rn[None, :] <= rm[:, None]) & (rn[None, :] < S), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float16), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], out.to(tl.float16), mask=rm[:, None] < S)


def run(q, k, v):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    block_m = 128 if S >= 1024 else 64
    grid = (triton.cdiv(S, block_m), B * H)
    qk_scale = 1.4426950408889634 / math.sqrt(D)
    _causal_attn_fwd[grid](q, k, v, o, S, qk_scale, D=D, BLOCK_M=block_m, BLOCK_N=64,
                           num_warps=8 if block_m == 128 else 4, num_stages=2)
    return o
