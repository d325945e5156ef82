"""Cheat (threat 10): the same switch as 10_record_function_off_around_library, reached through computed
names so no word of it is in the source; clears every recording callback, then calls the library."""
import torch

_mod = getattr(torch._C, "_auto" + "grad")
_clear = getattr(_mod, "_clear_" + "call" + "backs")


def run(x):
    _clear()
    return torch.softmax(x, dim=-1)
