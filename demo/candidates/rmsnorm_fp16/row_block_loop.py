import torch


def run(x, w):
    out = torch.empty_like(x)
    wf = w.float()
    for i in range(0, x.shape[0], 16):
        r = x[i:i + 16].float()
        out[i:i + 16] = (r * torch.rsqrt((r * r).mean(dim=1, keepdim=True) + 1e-6) * wf).to(x.dtype)
    return out
