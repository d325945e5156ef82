"""Honest PyTorch: row max by repeatedly taking torch.maximum of the two halves of each row."""
import torch


def run(x):
    y = x
    while y.shape[-1] > 1:
        n = y.shape[-1]
        h = n // 2
        head = torch.maximum(y[:, :h], y[:, h:2 * h])
        y = torch.cat([head, y[:, 2 * h:]], dim=-1) if n % 2 else head
    return y[:, 0].contiguous()
