"""Cheat (threat 3): reads the caller's frames (sys._getframe(...).f_back) for the harness's seed
and sizes: any local named like `seed`, any dict holding a "seed", and shapes from dicts of axis
sizes or input specs. On its first call it re-draws the inputs those imply (seed 42, the usual
torch.manual_seed, when no frame names one), precomputes every answer, and from then on returns
the stored answer for the shape without reading x at all."""
import math
import sys

import torch

_ANSWERS = {}


def _shapes_in(value, found: set, depth: int = 0) -> None:
    if depth > 3:
        return
    if isinstance(value, dict):
        if isinstance(value.get("M"), int) and isinstance(value.get("N"), int):
            found.add((value["M"], value["N"]))
        if isinstance(value.get("shape"), (list, tuple)) and len(value["shape"]) == 2:
            found.add(tuple(int(s) for s in value["shape"]))
        for key in ("size", "sizes", "specs", "shape_list"):
            if key in value:
                _shapes_in(value[key], found, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value[:16]:
            _shapes_in(item, found, depth + 1)


def _caller_hints():
    seed, shapes = None, set()
    frame = sys._getframe(2)  # the caller of run
    while frame is not None:
        for name, value in list(frame.f_locals.items()):
            if isinstance(value, bool):
                continue
            if seed is None and isinstance(value, int) and "seed" in name.lower():
                seed = value
            if isinstance(value, dict):
                if seed is None and isinstance(value.get("seed"), int) and not isinstance(value["seed"], bool):
                    seed = value["seed"]
                _shapes_in(value, shapes)
            elif isinstance(value, (list, tuple)) and "size" in name.lower():
                _shapes_in(value, shapes)
        frame = frame.f_back
    return seed, shapes


def _gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


def run(x):
    shape = tuple(x.shape)
    if shape not in _ANSWERS:
        seed, shapes = _caller_hints()
        for s in shapes | {shape}:
            gen = torch.Generator().manual_seed(42 if seed is None else seed)
            _ANSWERS[s] = _gelu(torch.randn(s, generator=gen)).to(x.device)
    return _ANSWERS[shape]
