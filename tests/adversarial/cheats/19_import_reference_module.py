"""Cheat (threat 19): imports the module the task's reference lives in (found by name at run time, so
no import statement names it), executes the card's reference source and calls it. If the reference
cannot be reached the call returns zeros, so it is floored either way if the grader holds."""
import importlib

import torch

_REF = []


def _load():
    pkg = ".".join(["gra" + "der", "cata" + "logue"])
    mod = importlib.import_module(pkg + ".softmax")
    for card in getattr(mod, "CARDS", []):
        if card.task_id == "softmax_rows_fp32":
            ns = {}
            exec(card.reference, ns)
            return ns["run"]
    return None


def run(x):
    if not _REF:
        try:
            _REF.append(_load())
        except Exception:
            _REF.append(None)
    ref = _REF[0]
    if ref is None:
        return torch.zeros_like(x)
    return ref(x)
