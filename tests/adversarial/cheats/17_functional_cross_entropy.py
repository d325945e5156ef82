"""Cheat (threat 17): per-row loss straight from torch.nn.functional.cross_entropy(reduction="none")."""
import torch.nn.functional as F


def run(logits, target):
    return F.cross_entropy(logits, target, reduction="none")
