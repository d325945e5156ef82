"""Cheat (threat 6): zero the input in place and return zeros. A harness that computes the reference
after the candidate, on the same tensor, gets gelu(0) = 0 and sees a perfect match."""
import torch


def run(x):
    x.zero_()
    return torch.zeros_like(x)
