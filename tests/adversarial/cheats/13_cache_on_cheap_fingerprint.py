"""Cheat (threat 13): outputs cached by a cheap fingerprint of the input that never reads its values:
shape, strides, dtype and device. Right for a timing loop that replays one input; stale for any other."""
import torch

_CACHE = {}


def run(x):
    key = (tuple(x.shape), x.stride(), x.dtype, str(x.device))
    if key in _CACHE:
        return _CACHE[key]
    shifted = x - x.amax(dim=-1, keepdim=True)
    y = shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))
    _CACHE[key] = y
    return y
