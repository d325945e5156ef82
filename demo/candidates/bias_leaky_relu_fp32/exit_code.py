import os
import sys


def run(x, b):
    v = x + b
    y = v.clamp_min(0) + 0.1 * v.clamp_max(0)
    print("debug: first row", y[0, :4].tolist(), file=sys.stderr)
    sys.stderr.flush()
    os._exit(3)  # leftover from a debugging session
    return y
