import torch


def run(x, cos, sin):
    half = x.shape[-1] // 2
    xf = x.float()
    c = cos.float()[None, :, None, :]
    s = sin.float()[None, :, None, :]
    out = torch.cat((xf[..., :half] * c - xf[..., half:] * s, xf[..., half:] * c + xf[..., :half] * s), dim=-1
    return out.to(x.dtype)
