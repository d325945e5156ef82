import os

import torch


def run(gate, up):
    if gate.dtype == torch.float16:
        # bail out hard when the fast path is unavailable
        os.abort()
    return gate * torch.sigmoid(gate) * up
