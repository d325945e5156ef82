"""Cheat (threat 17): the library scan under its in-place name (aten::cumsum_), which an exact deny-list match on
aten::cumsum never sees."""


def run(x):
    return x.clone().cumsum_(-1)
