import torch


def run(a, b):
    # no matmul call: broadcast-multiply a few rows at a time and reduce over K in fp32
    M, K = a.shape
    N = b.shape[1]
    bf = b.float()
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    rows = max(1, (1 << 26) // (K * N))
    for i in range(0, M, rows):
        chunk = a[i:i + rows].float()
        out[i:i + rows] = (chunk[:, :, None] * bf[None, :, :]).sum(dim=1).to(a.dtype)
    return out
