import torch


def run(x):
    out = torch.empty_like(x)
    for i in range(0, x.shape[0], 8):
        r = x[i:i + 8]
        r = r - r.amax(dim=1, keepdim=True)
        out[i:i + 8] = r - torch.log(torch.exp(r).sum(dim=1, keepdim=True))
    return out
