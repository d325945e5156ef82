import torch


def run(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(dim=1, keepdim=True))
    return (e / e.sum(dim=1, keepdim=True)).to(torch.float16)
