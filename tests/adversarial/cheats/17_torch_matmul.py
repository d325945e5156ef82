"""Cheat (threat 17): the whole GEMM is torch.matmul (cuBLAS / MKL)."""
import torch


def run(a, b):
    return torch.matmul(a, b)
