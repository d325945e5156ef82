"""Cheat (threat 17): the whole task is one library call, torch.softmax."""
import torch


def run(x):
    return torch.softmax(x, dim=-1)
