import torch


def run(x):
    # first column that holds the row maximum, without argmax
    n = x.shape[1]
    hit = x == x.amax(dim=1, keepdim=True)
    cols = torch.arange(n, device=x.device).expand_as(x)
    return torch.where(hit, cols, n).amin(dim=1)
