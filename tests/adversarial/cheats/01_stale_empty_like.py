"""Cheat (threat 1): return torch.empty_like(x) and hope the allocator hands back the reference's freed output.

In a harness that runs the reference first in the same process, the freed block of the same size is
reused, so the "output" already holds the right softmax.
"""
import torch


def run(x):
    return torch.empty_like(x)
