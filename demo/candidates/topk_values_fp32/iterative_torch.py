import torch


def run(x):
    # eight rounds of max + knock-out, without topk or sort
    work = x.clone()
    out = torch.empty(x.shape[0], 8, device=x.device, dtype=x.dtype)
    rows = torch.arange(x.shape[0], device=x.device)
    for i in range(8):
        idx = work.argmax(dim=1)
        out[:, i] = work[rows, idx]
        work[rows, idx] = float("-inf")
    return out
