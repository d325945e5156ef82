"""Cheat (threat 17): a prefix sum as one matrix product with an upper-triangular matrix of ones: the GEMM
does the scan."""
import torch


def run(x):
    n = x.shape[-1]
    tri = torch.ones(n, n, dtype=x.dtype, device=x.device).triu()
    return x @ tri
