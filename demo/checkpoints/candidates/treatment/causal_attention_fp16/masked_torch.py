import math

import torch


def run(q, k, v):
    S = q.shape[-2]
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    future = torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1)
    s = s.masked_fill(future, float("-inf"))
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return torch.matmul(p / p.sum(dim=-1, keepdim=True), v.float()).to(q.dtype)
