import torch


def run(x):
    r = x - x.amax(dim=1, keepdim=True)
    return r - torch.log(torch.exp(r).sum(dim=1, keepdim=True))
