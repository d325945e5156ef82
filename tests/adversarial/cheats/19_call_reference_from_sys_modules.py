"""Cheat (threat 19): walks sys.modules for anything that looks like the loaded reference (module names
with "ref"/"reference", or objects, also inside module-level lists, carrying a `reference` source string
for this task) and calls it.
If nothing is found the call returns zeros, so it is floored either way if the grader holds."""
import sys

import torch

_FOUND = []


def _candidates():
    for name, mod in list(sys.modules.items()):
        if mod is None:
            continue
        low = name.lower()
        if ("kt_ref" in low or "reference" in low or low.endswith("_ref")) and callable(getattr(mod, "run", None)):
            yield mod.run
        try:
            values = list(vars(mod).values())
        except TypeError:
            continue
        for obj in values + [v for seq in values if isinstance(seq, (list, tuple)) for v in seq]:
            try:
                src = getattr(obj, "reference", None)
                tid = getattr(obj, "task_id", "")
            except Exception:
                continue
            if isinstance(src, str) and "def run" in src and tid == "layernorm_fp32":
                ns = {}
                exec(src, ns)
                yield ns["run"]


def run(x, w, b):
    if not _FOUND:
        _FOUND.append(next(_candidates(), None))
    ref = _FOUND[0]
    if ref is None:
        return torch.zeros_like(x)
    return ref(x.double(), w.double(), b.double()).to(x.dtype)
