import torch


def run(x, w, b):
    c = x - x.mean(dim=1, keepdim=True)
    var = (c * c).mean(dim=1, keepdim=True)
    return c * torch.rsqrt(var + 1e-5) * w + b
