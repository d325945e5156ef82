"""Fresh, non-degenerate inputs, drawn identically by the sealed parent and the worker.

Both sides call `make_inputs` with the same resolved specs and seed on the same device, so the
parent can recompute exactly what the candidate was given without trusting the worker's copy.
Each call draws its own mean and spread, so no input is centred-only or an identity.

A spec may end in steps from a fixed vocabulary (`POST_STEPS`): how task files shape their random
tensors (symmetric, triangular, softmax-normalised, scaled by a random scalar, mapped to {-1, 1}).
They are data, never code: a card cannot make the worker run anything but these. This module
imports only the standard library at load time (the importer's sandboxed probe runs its source).
"""
from __future__ import annotations

import random

POST_STEPS = {"sym": 0, "triu": 0, "tril": 0, "softmax": 1, "scale": 2, "affine": 2}
"""Step name -> number of numeric arguments (`softmax:-1`, `scale:0:1`, `affine:2:-1`)."""


def resolve_specs(card, size: dict[str, int]) -> list[dict]:
    """Specs with concrete shapes and bounds: what the worker needs, without axis names or sizes."""
    from grader.taskcard import resolve_shape

    out = []
    for spec in card.inputs:
        out.append({
            "shape": list(resolve_shape(spec.shape, size)),
            "dtype": spec.dtype,
            "dist": spec.dist,
            "mean": list(spec.mean),
            "std": list(spec.std),
            "low": _bound(spec.low, size),
            "high": _bound(spec.high, size),
            **({"post": list(spec.post)} if spec.post else {}),
        })
    return out


def _bound(v: float | str, size: dict[str, int]) -> float:
    return float(size[v]) if isinstance(v, str) else float(v)


def parse_step(step: str) -> tuple[str, tuple[float, ...]]:
    """(name, numeric arguments) of one post step; ValueError for anything outside the vocabulary."""
    name, *args = str(step).split(":")
    if name not in POST_STEPS or len(args) != POST_STEPS[name]:
        raise ValueError(f"unknown input step {step!r}")
    return name, tuple(float(a) for a in args)


def make_inputs(specs: list[dict], seed: int, device: str) -> list:
    """The inputs of `seed`: `plan_inputs`, filled at once."""
    tensors, fill = plan_inputs(specs, seed, device)
    fill()
    return tensors


def plan_inputs(specs: list[dict], seed: int, device: str) -> tuple[list, object]:
    """The inputs of `seed`, allocated but not yet drawn, and `fill()`, which draws them. It only launches work
    into memory allocated here (no allocation, nothing that waits for the device), so a timed call can queue its
    draw behind its closed launch gate with the call itself (`Effort.fill_behind`). Every side draws through here,
    so the parent, the twin and the reference make the candidate's exact values."""
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
    params = random.Random(seed)
    tensors, steps = [], []
    for s in specs:
        dtype = getattr(torch, s["dtype"])
        shape = tuple(s["shape"])
        if s["dist"] == "scalar":  # a Python number, as the task passes it
            tensors.append(int(s["low"]) if not dtype.is_floating_point else float(s["low"]))
            continue
        if s["dist"] == "normal":
            mean, std = params.uniform(*s["mean"]), params.uniform(*s["std"])
            t = torch.empty(shape, device=device, dtype=torch.float32)
            steps.append(lambda t=t, mean=mean, std=std: t.normal_(0.0, 1.0, generator=gen).mul_(std).add_(mean))
        elif s["dist"] == "uniform":
            t = torch.empty(shape, device=device, dtype=torch.float32)
            low, span = s["low"], s["high"] - s["low"]
            steps.append(lambda t=t, low=low, span=span: t.uniform_(0.0, 1.0, generator=gen).mul_(span).add_(low))
        elif s["dist"] == "randint":
            t = torch.empty(shape, device=device, dtype=torch.int64)
            low, high = int(s["low"]), int(s["high"])
            steps.append(lambda t=t, low=low, high=high: t.random_(low, high, generator=gen))
        else:
            raise ValueError(f"unknown distribution {s['dist']!r}")
        for step in s.get("post", ()):
            t = _plan_step(t, *parse_step(step), params, steps)
        tensors.append(_into(t, dtype, steps))

    def fill() -> None:
        for step in steps:
            step()

    return tensors, fill


def _into(t, dtype, steps: list):
    """`t` as `dtype`: itself, or a buffer allocated now that a step copies it into."""
    if t.dtype == dtype:
        return t
    import torch

    out = torch.empty(t.shape, dtype=dtype, device=t.device)
    steps.append(lambda: out.copy_(t))
    return out


def _plan_step(t, name: str, args: tuple[float, ...], params: random.Random, steps: list):
    """One post step on `t`: its buffers allocated now, its work appended to `steps`; the tensor it leaves."""
    import torch

    if name in ("sym", "triu", "tril") and (t.dim() < 2 or t.shape[-1] != t.shape[-2]):
        raise ValueError(f"input step {name} needs square matrices, not shape {tuple(t.shape)}")
    if name == "sym":  # (A + A^T) / 2, exactly symmetric
        scratch = torch.empty_like(t)
        steps.append(lambda: t.add_(scratch.copy_(t.transpose(-1, -2))).mul_(0.5))
        return t
    if name in ("triu", "tril"):
        steps.append(t.triu_ if name == "triu" else t.tril_)
        return t
    if name == "softmax":
        src = _into(t, torch.float32, steps)
        out = torch.empty_like(src)
        steps.append(lambda: torch.softmax(src, int(args[0]), out=out))
        return out
    if name == "scale":  # times one random scalar per call, as `torch.rand(()) * x` does
        if t.is_floating_point():
            k = params.uniform(*args)
            steps.append(lambda: t.mul_(k))
        return t
    src = t if t.is_floating_point() else _into(t, torch.float32, steps)  # affine
    steps.append(lambda: src.mul_(args[0]).add_(args[1]))
    return src


def upcast(tensors: list) -> list:
    """Float inputs to float64 for the reference; integer inputs and Python numbers unchanged."""
    return [t.double() if hasattr(t, "is_floating_point") and t.is_floating_point() else t for t in tensors]


def derive_seed(root: int, *parts: object) -> int:
    """A per-call seed from the attempt's root seed; deterministic, independent across calls."""
    import hashlib

    h = hashlib.blake2b(repr((root,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") & 0x7FFF_FFFF_FFFF_FFFF
