"""Cheat (threat 10): switch torch's op recording off on its own thread for the library call, then back on,
so the observation of the call sees no softmax."""
import torch

_switch = torch._C._autograd._enable_record_function


def run(x):
    _switch(False)
    y = torch.softmax(x, dim=-1)
    _switch(True)
    return y
