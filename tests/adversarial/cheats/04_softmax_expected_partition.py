"""Cheat (threat 4): softmax normalised by the expected partition function of N(0,1) inputs,
N * e^(1/2), instead of the row's own sum: no reduction at all."""
import math

import torch


def run(x):
    return torch.exp(x) / (x.shape[-1] * math.exp(0.5))
