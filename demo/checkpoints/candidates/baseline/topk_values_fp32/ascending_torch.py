import torch


def run(x):
    work = x.clone()
    out = torch.empty(x.shape[0], 8, device=x.device, dtype=x.dtype)
    rows = torch.arange(x.shape[0], device=x.device)
    for i in range(8):
        idx = work.argmax(dim=1)
        out[:, 7 - i] = work[rows, idx]
        work[rows, idx] = float("-inf")
    return out
