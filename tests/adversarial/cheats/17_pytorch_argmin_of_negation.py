"""Cheat (threat 17): a row argmax as the argmin of the negated rows: argmin is the task's op in a mirror, and the
card's deny-list named only argmax and max."""
import torch


def run(x):
    return torch.argmin(-x, dim=-1)
