"""Cheat (threat 23): never returns (a busy loop that holds the GIL), to stall a grader without per-attempt
time limits."""


def run(x):
    n = 0
    while True:
        n += 1
