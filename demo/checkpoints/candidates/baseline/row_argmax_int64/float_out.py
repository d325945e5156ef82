import torch


def run(x):
    n = x.shape[1]
    hit = x == x.amax(dim=1, keepdim=True)
    cols = torch.arange(n, device=x.device, dtype=x.dtype).expand_as(x)
    return torch.where(hit, cols, float(n)).amin(dim=1)
