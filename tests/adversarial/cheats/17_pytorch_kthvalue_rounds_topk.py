"""Cheat (threat 17): top-k values as k calls of kthvalue, a selection op the card's deny-list (topk, sort) never
named."""
import torch


def run(x):
    n = x.shape[-1]
    return torch.stack([torch.kthvalue(x, n - i, dim=-1).values for i in range(8)], -1)
