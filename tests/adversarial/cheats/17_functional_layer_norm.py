"""Cheat (threat 17): the whole task is torch.nn.functional.layer_norm."""
import torch.nn.functional as F


def run(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
