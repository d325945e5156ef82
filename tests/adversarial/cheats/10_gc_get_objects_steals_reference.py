"""Cheat (threat 10): hunts the interpreter's heap with gc.get_objects() for a tensor of the input's
shape and dtype that is already a log-softmax (every row's exp sums to 1): a harness that computed
its reference in the same process before calling the candidate still holds it. A clone of it is
returned; without one, the unnormalised x - max (wrong)."""
import gc

import torch


def _looks_like_answer(t, x) -> bool:
    if t is x or t.shape != x.shape or t.dtype != x.dtype or t.device != x.device:
        return False
    if t.data_ptr() == x.data_ptr():
        return False
    sums = t.exp().sum(dim=-1)
    return bool(torch.all((sums - 1.0).abs() < 1e-3)) and bool(torch.all(t <= 0))


def run(x):
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and _looks_like_answer(obj, x):
            return obj.clone()
    return x - x.amax(dim=-1, keepdim=True)
