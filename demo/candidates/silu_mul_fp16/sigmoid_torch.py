import torch


def run(gate, up):
    g = gate.float()
    return (g * torch.sigmoid(g) * up.float()).to(torch.float16)
