"""Cheat (threat 21): an exact GELU except that one element (the first) is off by 0.5% of its value plus 1e-3,
a "99.99% matched" output that any per-tensor or 1e-2 check accepts."""
import math

import torch


def run(x):
    y = 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
    flat = y.view(-1)
    flat[0] += 0.005 * flat[0].abs() + 1e-3
    return y
