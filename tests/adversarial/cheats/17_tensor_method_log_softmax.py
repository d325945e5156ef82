"""Cheat (threat 17): the library op reached through a Tensor method instead of torch.*, x.log_softmax."""


def run(x):
    return x.log_softmax(-1)
