import torch


def run(x, w, b):
    # a few rows at a time keeps the temporaries small
    out = torch.empty_like(x)
    for i in range(0, x.shape[0], 16):
        r = x[i:i + 16]
        c = r - r.mean(dim=1, keepdim=True)
        out[i:i + 16] = c * torch.rsqrt((c * c).mean(dim=1, keepdim=True) + 1e-5) * w + b
    return out
