"""Honest PyTorch: RMS norm from the mean of squares and rsqrt."""
import torch


def run(x, w):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * w
