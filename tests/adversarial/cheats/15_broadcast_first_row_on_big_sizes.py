"""Cheat (threat 15): on sizes with at least 64 rows only the first row is normalised and returned as a
zero-copy broadcast view (expand), so that size costs one row instead of M; smaller sizes are honest."""
import torch


def _rms(x, w):
    return x * torch.rsqrt((x * x).mean(dim=-1, keepdim=True) + 1e-6) * w


def run(x, w):
    if x.shape[0] >= 64:
        return _rms(x[:1], w).expand(x.shape[0], -1)
    return _rms(x, w)
