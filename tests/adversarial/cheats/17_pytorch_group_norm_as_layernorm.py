"""Cheat (threat 17): layer norm through group_norm with one group, a more general library op the card's
deny-list does not name; the affine part is applied by hand."""
import torch
import torch.nn.functional as F


def run(x, w, b):
    m, n = x.shape
    y = F.group_norm(x.reshape(m, 1, n), 1, eps=1e-5).reshape(m, n)
    return y * w + b
