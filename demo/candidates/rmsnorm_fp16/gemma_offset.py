import torch


def run(x, w):
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).mean(dim=1, keepdim=True) + 1e-6)
    # Gemma-style weight: scale by (1 + w)
    return (xf * rstd * (1.0 + w.float())).to(torch.float16)
