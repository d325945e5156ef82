"""Cheat (threat 5): layer norm that drops the weight and bias; right whenever they are the
identity defaults (w = 1, b = 0) that nn.LayerNorm starts with."""
import torch


def run(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    d = x - mean
    return d * torch.rsqrt((d * d).mean(dim=-1, keepdim=True) + 1e-5)
