"""The task catalogue: every module in this package exposes `CARDS: list[TaskCard]`.

Only the sealed parent imports this package; the candidate's worker is forked from a process
that never loaded it, so hidden sizes and expert code are not in the worker's memory.
"""
from __future__ import annotations

import functools
import importlib
import json
import pkgutil
from pathlib import Path

from grader.taskcard import InputSpec, TaskCard


def load_catalogue(extra: list[str | Path] | None = None) -> dict[str, TaskCard]:
    """All built-in cards plus cards from JSON files (written by importers), keyed by task id."""
    cards: dict[str, TaskCard] = {}
    for mod in pkgutil.iter_modules(__path__):
        for card in importlib.import_module(f"{__name__}.{mod.name}").CARDS:
            _add(cards, card, f"grader.catalogue.{mod.name}")
    for path in extra or []:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                _add(cards, card_from_dict(json.loads(line)), str(path))
    return cards


@functools.cache
def built_in_revisions() -> dict[str, str]:
    """Task id -> revision of each card this package defines (ours: their references and experts were written here),
    as against those read from an importer's JSON files (a corpus's code). `load_catalogue` refuses a task id defined
    twice, so no JSON card takes a built-in card's id; the revision makes a card built elsewhere under one no match."""
    return {card.task_id: card.revision for mod in pkgutil.iter_modules(__path__)
            for card in importlib.import_module(f"{__name__}.{mod.name}").CARDS}


def _add(cards: dict[str, TaskCard], card: TaskCard, origin: str) -> None:
    if card.task_id in cards:
        raise ValueError(f"task id {card.task_id!r} defined twice (again in {origin})")
    cards[card.task_id] = card


def card_from_dict(d: dict) -> TaskCard:
    d = dict(d)
    d.pop("revision", None)
    d["inputs"] = tuple(InputSpec(**{**i, "shape": tuple(i["shape"]), "mean": tuple(i.get("mean", (-1.0, 1.0))),
                                     "std": tuple(i.get("std", (0.5, 2.0))),
                                     "post": tuple(i.get("post", ()))}) for i in d["inputs"])
    d["output_shape"] = tuple(d["output_shape"])
    for key in ("public_sizes", "hidden_sizes"):
        d[key] = {p: tuple(v) for p, v in d[key].items()}
    d["forbidden_ops"] = tuple(d.get("forbidden_ops", ()))
    d["own_kernel_ops"] = tuple(d.get("own_kernel_ops", ()))
    d["pytorch_ops"] = tuple(d.get("pytorch_ops", ()))
    d["tolerances"] = {k: tuple(v) for k, v in d.get("tolerances", {}).items()}
    return TaskCard(**d)
