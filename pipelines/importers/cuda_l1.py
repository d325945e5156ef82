"""CUDA-L1 corpus: one JSONL file per GPU, one KernelBench task per line.

Each line carries the task's reference (`ref_code`), the authors' best candidate for it on that
GPU (`custom_code`, a KernelBench `ModelNew` module, empty for some tasks) and five claimed
speedups (`score_*`, against eager PyTorch, torch.compile, CUDA graphs and cuDNN baselines). The
GPU is the row's own `gpu` field when it has one, else the file name's (the published corpus names
its files after the GPU and leaves the rows without it). Each line is one attempt-bearing record; the
speedups are claims.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from grader.taskcard import TaskCard
from pipelines.core.rawattempt import MAX_LINE_BYTES, Quarantined, RawAttempt, id_part
from pipelines.importers import kernelbench as kb
from pipelines.importers.base import (ImportBatch, TaskReject, admit, decoded_or_quarantined, iter_lines, problems_of,
                                      quarantine, sha256_hex, type_problem)

FORMAT = "cuda-l1"
AGENT = "cuda-l1"
MODEL = "deepreinforce-ai/CUDA-L1"
SCORE_FIELDS = ("score_default", "score_torch_compile_default", "score_torch_compile_reduce_overhead",
                "score_cuda_graph", "score_cudnn")
"""Claimed speedups, each against one baseline; `score_default` is the one against eager PyTorch."""
MAX_LEVEL, MAX_TASK = 9, 99_999


def _speedup(v: Any) -> float | None:
    """A claimed speedup as a positive finite float, or None (the corpus stores floats or strings)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v.strip() if isinstance(v, str) else v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) and f > 0 else None


@dataclass
class Reader:
    """Reads CUDA-L1 files one at a time; keeps ids and task texts across files of one import."""

    probe: Callable = kb.probe_outputs
    """Output probe used to build cards (tests of the parser swap in a stub)."""
    seen: set[str] = field(default_factory=set)
    refs: dict[tuple[int, int], str] = field(default_factory=dict)
    """First reference text seen per (level, task): a different text later is a conflict."""
    cards: dict[tuple[int, int], TaskCard | TaskReject] = field(default_factory=dict)

    def read_lines(self, lines: Iterable[tuple[int, bytes]], origin: str, gpu: str,
                   ) -> tuple[list[RawAttempt | Quarantined], list[dict[str, Any]]]:
        """All records of one file (held in memory only for this file), in line order."""
        decoded: list[tuple[str, bytes, dict[str, Any] | Quarantined]] = []
        for lineno, raw in lines:
            if raw.strip():
                where = f"{origin}:{lineno}"
                decoded.append((where, raw, _decode(raw, where)))
        fresh: dict[tuple[int, int], str] = {}
        for _, _, row in decoded:
            if isinstance(row, dict):
                key = (row["level_id"], row["task_id"])
                if key not in self.refs and key not in fresh:
                    fresh[key] = row["ref_code"]
        self.cards.update(kb.build_cards(fresh, probe=self.probe) if fresh else {})
        self.refs.update(fresh)
        out: list[RawAttempt | Quarantined] = []
        claims: list[dict[str, Any]] = []
        for where, raw, row in decoded:
            if isinstance(row, Quarantined):
                out.append(row)
                continue
            row_gpu = id_part(row["gpu"].strip().lower()) if row.get("gpu") is not None else gpu
            rec = self._attempt(row, where, raw, row_gpu, "row" if row.get("gpu") is not None else "file_name")
            out.append(rec)
            claims.extend(_claims(row, where, row_gpu, rec))
        return out, claims

    def _attempt(self, row: dict[str, Any], where: str, raw: bytes, gpu: str,
                 gpu_from: str) -> RawAttempt | Quarantined:
        level, task = row["level_id"], row["task_id"]
        aid = f"cuda-l1:{gpu}:L{level}:T{task}"
        code = row.get("custom_code")
        if code is None or not isinstance(code, str) or not code.strip():
            if code is not None and not isinstance(code, str):
                return quarantine(where, aid, "bad_type", f"custom_code is {type(code).__name__}, not a string", raw)
            return quarantine(where, aid, "empty_source", "custom_code is empty: the corpus has no candidate "
                              "for this task on this GPU (its claimed scores are kept as claims)", raw)
        if code.strip() == "None":
            return quarantine(where, aid, "placeholder_source", "custom_code is the literal text 'None' "
                              "(a serialised null), not a program; its claimed scores are kept as claims", raw)
        if self.refs.get((level, task)) != row["ref_code"]:
            return quarantine(where, aid, "conflicting_task", f"ref_code of L{level}/T{task} differs from "
                              "the first text seen for that task; one task id cannot name two programs", raw)
        card = self.cards.get((level, task))
        if isinstance(card, TaskReject) or card is None:
            why = f"{card.code}: {card.reason}" if card is not None else "no card"
            return quarantine(where, aid, "unsupported_task", f"task L{level}/T{task} cannot be graded ({why})", raw)
        scores = {k: row.get(k) for k in SCORE_FIELDS if k in row}
        obj = {
            "attempt_id": aid, "task_id": card.task_id, "agent": AGENT, "model": MODEL, "trajectory_id": aid,
            "turn": 1, "language": kb.language_of(code), "source": code, "entry_point": "ModelNew",
            "source_format": FORMAT, "claimed_speedup": _speedup(row.get("score_default")),
            "extra": {"original_sha256": sha256_hex(raw), "gpu": gpu, "gpu_from": gpu_from, "level_id": level,
                      "source_task_id": task,
                      "ref_sha256": sha256_hex(row["ref_code"]), "scores": scores,
                      "init_inputs": _init_inputs(row["ref_code"])},
        }
        return admit(obj, where, raw, self.seen)


@functools.lru_cache(maxsize=1024)
def _init_inputs(ref_code: str) -> list[Any] | None:
    return kb.init_inputs_of(ref_code)


def _decode(raw: bytes, where: str) -> dict[str, Any] | Quarantined:
    """One line to a row with sane `level_id`, `task_id` and `ref_code`, or a quarantine row."""
    row = decoded_or_quarantined(raw, where, MAX_LINE_BYTES, "row")
    if isinstance(row, Quarantined):
        return row
    missing = [k for k in ("level_id", "task_id", "ref_code") if row.get(k) is None]
    if missing:
        return quarantine(where, None, "missing_field", f"missing required field(s): {', '.join(missing)}", raw)
    for k, top in (("level_id", MAX_LEVEL), ("task_id", MAX_TASK)):
        v = row[k]
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top:
            return quarantine(where, None, "bad_type", f"{k} must be an integer in 1..{top}, got {str(v)[:40]!r}", raw)
    if not isinstance(row["ref_code"], str) or not row["ref_code"].strip():
        return quarantine(where, None, "bad_type", "ref_code must be a non-empty string", raw)
    gpu = row.get("gpu")
    if gpu is not None and not (isinstance(gpu, str) and gpu.strip() and len(gpu) <= 60):
        return quarantine(where, None, "bad_type", f"gpu must be a GPU name (a short non-empty string) or absent, "
                          f"got {str(gpu)[:40]!r}", raw)
    return row


def _claims(row: dict[str, Any], where: str, gpu: str, rec: RawAttempt | Quarantined) -> list[dict[str, Any]]:
    """One claim per score the row states; a score that is not a positive number is kept as a claim without a
    speedup and named in its `unreadable_fields`, never silently null."""
    level, task = row["level_id"], row["task_id"]
    admitted = isinstance(rec, RawAttempt)
    out = []
    for k in SCORE_FIELDS:
        v = row.get(k)
        if v is None:
            continue
        claim = {
            "source_format": FORMAT, "origin": where, "attempt_id": rec.attempt_id,
            "attempt_admitted": admitted, "task_id": kb.kernelbench_task_id(level, task), "gpu": gpu,
            "level": level, "baseline": k.removeprefix("score_"), "claimed_speedup": _speedup(v),
            "claimed_raw": v if isinstance(v, (int, float, str)) and not isinstance(v, bool) else repr(v)[:80],
        }
        if claim["claimed_speedup"] is None:
            claim["unreadable_fields"] = {k: type_problem(v, "a positive speedup")}
        out.append(claim)
    return out


def gpu_of(path: Path) -> str:
    """The GPU a CUDA-L1 file was tuned on, from its name (`h100.jsonl` -> `h100`), for rows without `gpu`."""
    return id_part(path.name.removesuffix(".jsonl").lower())


def import_path(paths: list[Path], probe: Callable = kb.probe_outputs) -> ImportBatch:
    """Import CUDA-L1 files (or folders of them); each line becomes one attempt or one quarantine row."""
    reader = Reader(probe=probe)
    attempts: list[RawAttempt] = []
    quarantined: list[Quarantined] = []
    claims: list[dict[str, Any]] = []
    for path in _files(paths):
        rows, file_claims = reader.read_lines(iter_lines(path), str(path), gpu_of(path))
        for r in rows:
            (attempts if isinstance(r, RawAttempt) else quarantined).append(r)
        claims.extend(file_claims)
    cards = [c for c in reader.cards.values() if isinstance(c, TaskCard)]
    rejected = [Quarantined(f"kernelbench L{lv}/T{t}", None, c.code, f"{kb.kernelbench_task_id(lv, t)}: {c.reason}",
                            reader.refs.get((lv, t), "")[:200])
                for (lv, t), c in sorted(reader.cards.items()) if isinstance(c, TaskReject)]
    return ImportBatch(FORMAT, attempts, quarantined, sorted(cards, key=lambda c: c.task_id), claims, rejected,
                       problems_of(claims))


def _files(paths: Iterable[Path]) -> Iterator[Path]:
    for p in map(Path, paths):
        yield from (sorted(p.glob("*.jsonl")) if p.is_dir() else [p])
