"""Honest PyTorch: top-8 values per row by eight rounds of amax and knocking out the first maximum."""
import torch


def run(x):
    n = x.shape[-1]
    cols = torch.arange(n, device=x.device)
    v = x.clone()
    picked = []
    for _ in range(8):
        top = v.amax(dim=-1, keepdim=True)
        first = torch.where(v == top, cols, n).amin(dim=-1, keepdim=True)
        picked.append(top)
        v = v.scatter(-1, first, float("-inf"))
    return torch.cat(picked, dim=-1)
