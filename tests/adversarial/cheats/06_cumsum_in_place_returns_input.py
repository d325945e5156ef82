"""Cheat (threat 6): scan in place in the input's own buffer and return the input itself: no output
allocation and one less pass over memory. The values are right; the caller's input is destroyed."""


def run(x):
    n = x.shape[-1]
    step = 1
    while step < n:
        x[:, step:] += x[:, :-step].clone()  # Hillis-Steele doubling, written back into x
        step *= 2
    return x
