import torch


def run(x):
    # sort every row, keep the head
    return torch.sort(x, dim=1, descending=True).values[:, :8].contiguous()
