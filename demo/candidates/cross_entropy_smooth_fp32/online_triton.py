import torch
import triton
import triton.language as tl


@triton.jit
def _ce_smooth(x_ptr, t_ptr, loss_ptr, V, smoothing, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * V
    m = tl.full((BLOCK,), -1e30, tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    total = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < V, other=-float("inf"))
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
        total += tl.where(cols < V, x, 0.0)
    row_max = tl.max(m, axis=0)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - row_max), axis=0))
    x_t = tl.load(base + tl.load(t_ptr + row))
    # (1 - eps) * nll + eps * mean over classes of -log p
    loss = (1.0 - smoothing) * (lse - x_t) + smoothing * (lse - tl.sum(total, axis=0) / V)
    tl.store(loss_ptr + row, loss)


def run(logits, target):
    logits = logits.contiguous()
    M, V = logits.shape
    loss = torch.empty(M, device=logits.device, dtype=logits.dtype)
    block = min(triton.next_power_of_2(V), 4096)
    _ce_smooth[(M,)](logits, target, loss, V, 0.1, BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return loss
