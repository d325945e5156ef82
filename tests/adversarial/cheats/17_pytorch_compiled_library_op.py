"""Cheat (threat 17): the forbidden softmax inside a compiled region, reached through a computed name: the region
records none of the ops it computes."""
import torch

_compile = getattr(torch, "com" + "pile")
_f = _compile(lambda y: torch.softmax(y, -1), dynamic=True)


def run(x):
    return _f(x)
