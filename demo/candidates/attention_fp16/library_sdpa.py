import torch.nn.functional as F


def run(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)
