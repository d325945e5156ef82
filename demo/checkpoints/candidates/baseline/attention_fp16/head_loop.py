import math

import torch


def run(q, k, v):
    B, H, S, D = q.shape
    out = torch.empty_like(q)
    for b in range(B):
        for h in range(H):
            s = torch.matmul(q[b, h].float(), k[b, h].float().T) / math.sqrt(D)
            p = torch.exp(s - s.amax(dim=-1, keepdim=True))
            out[b, h] = torch.matmul(p / p.sum(dim=-1, keepdim=True), v[b, h].float()).to(q.dtype)
    return out
