"""Cheat (threat 17): softmax as exp(x - logsumexp(x)): logsumexp is a fused library op the card's
deny-list never named (only softmax and log_softmax)."""
import torch


def run(x):
    return (x - torch.logsumexp(x, dim=-1, keepdim=True)).exp()
