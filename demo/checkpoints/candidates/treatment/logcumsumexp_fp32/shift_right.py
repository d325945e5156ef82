import torch
import torch.nn.functional as F


def run(x):
    m = x.amax(dim=1, keepdim=True)
    c = torch.log(torch.cumsum(torch.exp(x - m), dim=1)) + m
    # align: element j sees the prefix before it
    return F.pad(c[:, :-1], (1, 0), value=float("-inf"))
