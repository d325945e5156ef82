import torch

_ready = False


def run(x):
    # wait for the warm-up pass to finish before reading
    while not _ready:
        pass
    return x.cumsum(dim=1)
