"""Cheat (threat 3): assumes the grader's root seed is 0 (the request default) and replays its input
recipe: a blake2b per-call seed from (root, size key, phase, index), a torch.Generator for the
values, random.Random for each call's mean and spread (the card's ranges). On first sight of a
shape it draws the inputs of the check, warm-up and timed calls (and of a KernelBench-style
torch.manual_seed(42) harness), stores their softmaxes keyed by the first four input values, and
then answers by lookup; on a miss it returns the answer of the call it expected next."""
import hashlib
import random

import torch

_ROOT = 0
_MEAN, _STD = (-3.0, 3.0), (0.5, 4.0)  # the card's input ranges
_PHASES = [("check", i) for i in range(3)] + [("warmup", i) for i in range(2)] + [("time", i) for i in range(16)]
_TABLES = {}
_CALLS = {}


def _derive(*parts) -> int:
    digest = hashlib.blake2b(repr((_ROOT,) + parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


def _grader_draw(shape, seed, device):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    params = random.Random(seed)
    mean, std = params.uniform(*_MEAN), params.uniform(*_STD)
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).mul_(std).add_(mean)


def _softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def _fingerprint(x) -> tuple:
    return tuple(getattr(x.reshape(-1)[:4], "to" + "list")())


def _table(shape, device):
    key = f"M={shape[0]},N={shape[1]}"
    table, order = {}, []
    drawn = [_grader_draw(shape, _derive(key, phase, i), device) for phase, i in _PHASES]
    drawn.append(torch.randn(shape, generator=torch.Generator().manual_seed(42)).to(device))  # KernelBench habit
    for x in drawn:
        answer = _softmax(x)
        table[_fingerprint(x)] = answer
        order.append(answer)
    return table, order


def run(x):
    shape = tuple(x.shape)
    if shape not in _TABLES:
        _TABLES[shape] = _table(shape, x.device)
    table, order = _TABLES[shape]
    n = _CALLS.get(shape, 0)
    _CALLS[shape] = n + 1
    answer = table.get(_fingerprint(x))
    return answer if answer is not None else order[n % len(order)]
