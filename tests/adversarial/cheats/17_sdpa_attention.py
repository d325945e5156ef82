"""Cheat (threat 17): attention from torch's fused scaled_dot_product_attention."""
import torch.nn.functional as F


def run(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)
