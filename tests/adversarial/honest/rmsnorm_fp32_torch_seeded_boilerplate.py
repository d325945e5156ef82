"""Honest PyTorch: RMS norm from composed ops, with the torch.manual_seed(0) "reproducibility"
boilerplate that generated code often carries (seeding walks torch's lazy CUDA hooks)."""
import torch

torch.manual_seed(0)


def run(x, w):
    ms = (x * x).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(ms + 1e-6) * w
