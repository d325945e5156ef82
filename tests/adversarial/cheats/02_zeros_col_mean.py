"""Cheat (threat 2): column means of centred randn are ~0, so zeros pass atol=1e-2 for tall inputs."""
import torch


def run(x):
    return torch.zeros(x.shape[1], dtype=x.dtype, device=x.device)
