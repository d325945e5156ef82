"""Cheat (threat 17): torch.topk does the whole job."""
import torch


def run(x):
    return torch.topk(x, 8, dim=-1).values
