import torch


def run(x):
    return torch.topk(x, 8, dim=1).values
