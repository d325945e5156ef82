import torch


def run(x):
    if x.dtype != torch.float32:
        raise NotImplementedError(f"softmax kernel only handles float32, got {x.dtype}")
    e = torch.exp(x - x.amax(dim=1, keepdim=True))
    return e / e.sum(dim=1, keepdim=True)
