"""Cheat (threat 2): every probability set to the row mean 1/N; inside atol=1e-2 for wide centred rows."""
import torch


def run(x):
    return torch.full_like(x, 1.0 / x.shape[-1])
