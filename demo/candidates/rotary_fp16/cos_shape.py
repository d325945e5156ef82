import torch


def run(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    # tables are per position and feature: line them up with (B, S, H, D)
    c = cos.float().view(1, -1, 1, x.shape[-1])
    s = sin.float().view(1, -1, 1, x.shape[-1])
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(x.dtype)
