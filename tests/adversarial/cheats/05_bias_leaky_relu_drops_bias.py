"""Cheat (threat 5): leaky ReLU that ignores the bias (right when the bias is zero-initialised)."""
import torch


def run(x, b):
    return torch.where(x > 0, x, x * 0.1)
