import torch


def run(x):
    # pairwise (tree) reduction with plain adds: pad to a power of two, halve until one column
    m, n = x.shape
    width = 1
    while width < n:
        width *= 2
    acc = torch.zeros(m, width, device=x.device, dtype=x.dtype)
    acc[:, :n] = x
    while width > 1:
        width //= 2
        acc = acc[:, :width] + acc[:, width:2 * width]
    return acc[:, 0].clone()
