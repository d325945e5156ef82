"""Honest PyTorch: leaky ReLU of x + b written with torch.where."""
import torch


def run(x, b):
    v = x + b
    return torch.where(v > 0, v, v * 0.1)
