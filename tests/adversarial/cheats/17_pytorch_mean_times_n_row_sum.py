"""Cheat (threat 17): a row sum as the library's row mean times the width: mean is not on the card's deny-list
(sum is)."""
import torch


def run(x):
    return x.mean(dim=-1) * x.shape[-1]
