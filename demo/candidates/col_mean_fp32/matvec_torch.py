import torch


def run(x):
    # column sums as a product with a ones vector, in float64 so rounding stays small
    m = x.shape[0]
    ones = torch.ones(m, device=x.device, dtype=torch.float64)
    return (ones @ x.double() / m).to(x.dtype)
