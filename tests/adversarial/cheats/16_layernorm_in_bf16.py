"""Cheat (threat 16): an fp32 layer norm computed entirely in bfloat16 and cast back (errors ~1e-2)."""
import torch


def run(x, w, b):
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    mean = xb.mean(dim=-1, keepdim=True)
    d = xb - mean
    return (d * torch.rsqrt((d * d).mean(dim=-1, keepdim=True) + 1e-5) * wb + bb).float()
