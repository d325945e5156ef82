"""Cheat (threat 23): hangs at import time (before any call), where a grader may have no timeout."""
import time

time.sleep(3600)


def run(x):
    return x
