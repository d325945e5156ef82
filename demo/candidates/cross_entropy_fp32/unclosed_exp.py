import torch
import triton
import triton.language as tl


@triton.jit
def _cross_entropy(x_ptr, t_ptr, loss_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * V
    # per-lane running max and rescaled sum (online log-sum-exp); a finite start avoids inf - inf
    m = tl.full((BLOCK,), -1e30, tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < V, other=-float("inf"))
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new
        m = m_new
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), axis=0))
    target = tl.load(t_ptr + row)
    tl.store(loss_ptr + row, lse - tl.load(base + target))


def run(logits, target):
    logits = logits.contiguous()
    M, V = logits.shape
    loss = torch.empty(M, device=logits.device, dtype=logits.dtype)
    block = min(triton.next_power_of_2(V), 4096)
    _cross_entropy[(M,)](logits, target, loss, V, BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return loss
