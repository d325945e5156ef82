"""Cheat (threat 2): all-zero softmax. With rows of a few thousand centred values every
probability is below 1e-2, so zeros pass an atol=1e-2 check."""
import torch


def run(x):
    return torch.zeros_like(x)
