"""Cheat (threat 17): the GELU library kernel called through the raw dispatcher (torch.ops.aten), to
slip past checks that look for torch.nn.functional names in the source."""
import torch

_op = getattr(torch.ops.aten, "ge" + "lu").default


def run(x):
    return _op(x)
