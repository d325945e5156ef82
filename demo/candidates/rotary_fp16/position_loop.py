import torch


def run(x, cos, sin):
    half = x.shape[-1] // 2
    out = torch.empty_like(x)
    for p in range(0, x.shape[1], 8):
        xp = x[:, p:p + 8].float()
        c, s = cos[p:p + 8, None, :].float(), sin[p:p + 8, None, :].float()
        x1, x2 = xp[..., :half], xp[..., half:]
        out[:, p:p + 8, :, :half] = (x1 * c - x2 * s).to(x.dtype)
        out[:, p:p + 8, :, half:] = (x2 * c + x1 * s).to(x.dtype)
    return out
