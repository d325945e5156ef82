import torch
import torch.nn.functional as F


def run(x):
    # Hillis-Steele scan: log2(N) shifted adds
    y = x.clone()
    shift = 1
    n = x.shape[1]
    while shift < n:
        y = y + F.pad(y[:, :-shift], (shift, 0))
        shift *= 2
    return y
