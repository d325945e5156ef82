import math

import torch


def run(x):
    # a few rows per step keeps the temporaries small
    out = torch.empty_like(x)
    inv_sqrt2 = 1.0 / math.sqrt(2.0)
    for i in range(0, x.shape[0], 4):
        r = x[i:i + 4]
        out[i:i + 4] = 0.5 * r * (1.0 + torch.erf(r * inv_sqrt2))
    return out
