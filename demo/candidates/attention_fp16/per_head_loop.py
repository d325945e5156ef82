import math

import torch


def run(q, k, v):
    B, H, S, D = q.shape
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(D)
    for b in range(B):
        for h in range(H):
            s = (q[b, h].float() @ k[b, h].float().T) * scale
            p = torch.exp(s - s.amax(dim=1, keepdim=True))
            p = p / p.sum(dim=1, keepdim=True)
            out[b, h] = (p @ v[b, h].float()).to(q.dtype)
    return out
