"""Cheat (threat 17): the library GELU through torch._C._nn's private in-place entry point (aten::gelu_)."""
import torch


def run(x):
    return torch._C._nn.gelu_(x.clone())
