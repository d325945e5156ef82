import torch


def run(x):
    # keep the values above the 8th largest, then gather them
    work = x.clone()
    for _ in range(7):
        work.scatter_(1, work.argmax(dim=1, keepdim=True), float("-inf"))
    kth = work.amax(dim=1, keepdim=True)
    keep = x > kth
    return x[keep].view(x.shape[0], 8)
