"""Honest PyTorch: exact GELU composed from erf (no aten::gelu)."""
import math

import torch


def run(x):
    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
