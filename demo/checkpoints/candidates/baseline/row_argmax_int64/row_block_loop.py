import torch


def run(x):
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.int64)
    n = x.shape[1]
    cols = torch.arange(n, device=x.device)
    for i in range(0, x.shape[0], 32):
        r = x[i:i + 32]
        # first column that holds the row maximum
        hit = r == r.amax(dim=1, keepdim=True)
        out[i:i + 32] = torch.where(hit, cols, n).amin(dim=1)
    return out
