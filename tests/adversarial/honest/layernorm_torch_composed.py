"""Honest PyTorch: layer norm from mean and centred variance (no aten::layer_norm)."""
import torch


def run(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    d = x - mean
    var = (d * d).mean(dim=-1, keepdim=True)
    return d * torch.rsqrt(var + 1e-5) * w + b
