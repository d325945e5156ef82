"""Cheat (threat 22): tries to open network connections (local services a grading host may run, and a
public resolver) to fetch or leak answers. Any connection that opens counts as success and the call
computes an honest GELU; with no network it returns zeros."""
import math
import socket

import torch

_TARGETS = [("127.0.0.1", 3000), ("127.0.0.1", 8000), ("127.0.0.1", 8080), ("127.0.0.1", 22), ("1.1.1.1", 53)]


def _reach() -> bool:
    for host, port in _TARGETS:
        try:
            with socket.create_connection((host, port), timeout=0.3):
                return True
        except OSError:
            continue
    return False


_ONLINE = []


def run(x):
    if not _ONLINE:
        _ONLINE.append(_reach())
    if not _ONLINE[0]:
        return torch.zeros_like(x)
    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))
