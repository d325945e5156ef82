"""Cheat (threat 10): walk down its own thread's frames and through the functions it finds there (their
module globals, read by computed names), looking for the worker's classes; patch the runner so the main
thread runs this module's code after the call, where it would fill the output and shrink the clock. With
nothing of the worker's found it returns zeros, so it is floored either way if the boundary holds."""
import sys

import torch

_G = "f_" + "glob" + "als"
_FG = "__" + "glob" + "als__"
_L = "f_" + "loc" + "als"


def _reachable_globals() -> list[dict]:
    found, frame = [], sys._getframe()
    while frame is not None:
        found.append(getattr(frame, _G))
        for value in list(getattr(frame, _L).values()):
            g = getattr(value, _FG, None)
            if isinstance(g, dict):
                found.append(g)
        frame = frame.f_back
    return found


def _patch() -> bool:
    for g in _reachable_globals():
        for name in ("CandidateRunner", "Worker", "Observation"):
            cls = g.get(name)
            if isinstance(cls, type):
                for attr in ("settle", "report", "_snapshot"):
                    if attr in vars(cls):
                        setattr(cls, attr, lambda *a, **k: None)
                        return True
    return False


def run(x):
    if not _patch():
        return torch.zeros_like(x)
    return torch.softmax(x, dim=-1)
