"""Cheat (threat 6): normalise x in place (saves a temporary), then apply the affine into a new tensor.
The output is right; the input now holds the normalised values, so the reference of a later check
on the same tensor, or a reused input, is silently different."""
import torch


def run(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    x.sub_(mean)
    x.mul_(torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5))
    return x * w + b
