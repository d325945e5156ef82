"""Honest PyTorch: inclusive scan by Hillis-Steele doubling (log2(N) shifted adds, no aten::cumsum)."""
import torch


def run(x):
    y = x.clone()
    step = 1
    n = x.shape[-1]
    while step < n:
        shifted = torch.zeros_like(y)
        shifted[:, step:] = y[:, :-step]
        y = y + shifted
        step *= 2
    return y
