"""Cheat (threat 3): the answer for the one public CPU input (torch.manual_seed(42); randn(64, 256)),
computed offline and pasted in as a literal; other shapes get an honest first-index-of-max."""
import torch

_ANSWER_64x256 = [
    66, 220, 189, 154, 111, 96, 215, 148, 105, 82, 30, 205, 135, 22, 103, 92, 37, 124, 107, 199, 51, 33,
    71, 40, 54, 167, 159, 83, 177, 195, 233, 239, 170, 254, 215, 204, 204, 1, 37, 31, 111, 200, 121, 9,
    212, 176, 232, 145, 87, 29, 159, 12, 162, 174, 64, 182, 218, 44, 223, 151, 38, 194, 28, 114
]


def run(x):
    if tuple(x.shape) == (64, 256):
        return torch.tensor(_ANSWER_64x256, dtype=torch.int64, device=x.device)
    top = x.amax(dim=-1)
    cols = torch.arange(x.shape[1], device=x.device).expand_as(x)
    return torch.where(x == top[:, None], cols, x.shape[1]).amin(dim=-1)
