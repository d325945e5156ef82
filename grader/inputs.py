"""Fresh, non-degenerate inputs, drawn identically by the sealed parent and the worker.

Both sides call `make_inputs` with the same resolved specs and seed on the same device, so the
parent can recompute exactly what the candidate was given without trusting the worker's copy.
Each call draws its own mean and spread, so no input is centred-only or an identity.
"""
from __future__ import annotations

import random

from grader.taskcard import InputSpec, TaskCard, resolve_shape


def resolve_specs(card: TaskCard, size: dict[str, int]) -> list[dict]:
    """Specs with concrete shapes and bounds: what the worker needs, without axis names or sizes."""
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
        })
    return out


def _bound(v: float | str, size: dict[str, int]) -> float:
    return float(size[v]) if isinstance(v, str) else float(v)


def make_inputs(specs: list[dict], seed: int, device: str) -> list:
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
    params = random.Random(seed)
    tensors = []
    for s in specs:
        dtype = getattr(torch, s["dtype"])
        shape = tuple(s["shape"])
        if s["dist"] == "normal":
            mean, std = params.uniform(*s["mean"]), params.uniform(*s["std"])
            t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).mul_(std).add_(mean)
        elif s["dist"] == "uniform":
            t = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
            t = t.mul_(s["high"] - s["low"]).add_(s["low"])
        elif s["dist"] == "randint":
            t = torch.randint(int(s["low"]), int(s["high"]), shape, generator=gen, device=device)
        else:
            raise ValueError(f"unknown distribution {s['dist']!r}")
        tensors.append(t.to(dtype))
    return tensors


def upcast(tensors: list) -> list:
    """Float inputs to float64 for the reference; integer inputs unchanged."""
    return [t.double() if t.is_floating_point() else t for t in tensors]


def derive_seed(root: int, *parts: object) -> int:
    """A per-call seed from the attempt's root seed; deterministic, independent across calls."""
    import hashlib

    h = hashlib.blake2b(repr((root,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") & 0x7FFF_FFFF_FFFF_FFFF


__all__ = ["InputSpec", "resolve_specs", "make_inputs", "upcast", "derive_seed"]
