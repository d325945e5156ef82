import ctypes

import torch


def run(x):
    # zero the output through a raw pointer (the pointer never got set)
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    out_ptr = 0
    ctypes.memset(out_ptr, 0, x.shape[0] * 4)
    return out
