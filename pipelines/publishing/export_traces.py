"""Export our graded records as FlashInfer-Bench Trace JSON lines.

A FlashInfer-Bench Trace is one (definition, workload, solution, evaluation) row; we write one per
timed *public* size of a graded record (hidden sizes never leave sealed storage), or one row with
an empty workload when the record has no per-size results (it failed before timing).

Status mapping (theirs is a closed enum without a reward-hacking value, so the mapping is lossy;
our own status, reason and reward always travel in `evaluation.log`, and in
`correctness.extra` where the schema allows correctness):

| ours            | theirs                                                   |
|-----------------|----------------------------------------------------------|
| correct         | PASSED (correctness + performance per size)              |
| wrong_output    | INCORRECT_SHAPE / INCORRECT_DTYPE for `bad_output`, else INCORRECT_NUMERICAL |
| cheat_flagged   | INCORRECT_NUMERICAL, `correctness.extra.kerneltraj_status = "cheat_flagged"` |
| compile_error   | COMPILE_ERROR                                            |
| runtime_error, crashed | RUNTIME_ERROR                                     |
| timeout         | TIMEOUT                                                  |
| infra_error, unsupported_on_backend | not exported: not the candidate's doing  |

Their `max_relative_error` / `max_absolute_error` are not what we measure (we keep the worst
|out-ref| / (atol + rtol*|ref|) ratio), so they are written as NaN (their schema's "unknown") and
our ratio goes to `correctness.extra`. `performance.reference_latency_ms` is our same-run expert
time, and `speedup_factor` the unclipped expert_ms / cand_ms.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable

from grader.taskcard import TaskCard

NAN = "NaN"  # how flashinfer-bench serialises an unknown error metric
_STATUS = {
    "correct": "PASSED", "wrong_output": "INCORRECT_NUMERICAL", "cheat_flagged": "INCORRECT_NUMERICAL",
    "compile_error": "COMPILE_ERROR", "runtime_error": "RUNTIME_ERROR", "crashed": "RUNTIME_ERROR",
    "timeout": "TIMEOUT",
}
NOT_EXPORTED = ("infra_error", "unsupported_on_backend")


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote and what it left out."""

    n_records: int
    """Graded records read."""
    n_traces: int
    """Trace lines written."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(attempt_id, why) for records that produced no trace."""


def parse_size_key(key: str) -> dict[str, int]:
    """`M=128,N=256` -> {"M": 128, "N": 256} (grader.taskcard.size_key's inverse)."""
    out: dict[str, int] = {}
    for part in filter(None, key.split(",")):
        name, _, value = part.partition("=")
        out[name.strip()] = int(value)
    return out


def _definition(task_id: str) -> str:
    return task_id.removeprefix("flashinfer_")


def _var_axes(card: TaskCard | None, axes: dict[str, int]) -> dict[str, int]:
    """Only the axes that vary across the card's sizes (FlashInfer workloads bind var axes only)."""
    if card is None:
        return axes
    sizes = [s for prof in (card.public_sizes, card.hidden_sizes) for ss in prof.values() for s in ss]
    const = {a for a in axes if len({s.get(a) for s in sizes}) == 1}
    return {a: v for a, v in axes.items() if a not in const}


def _status(rec: dict[str, Any]) -> str:
    ours = str(rec.get("status"))
    reason = str(rec.get("reason", "")).lower()
    # bad_output: not a plain tensor of the declared shape/dtype/device (grader.contract.Reason)
    if ours == "wrong_output" and (rec.get("reason_code") == "bad_output" or "shape" in reason or "dtype" in reason):
        return "INCORRECT_DTYPE" if "dtype" in reason else "INCORRECT_SHAPE"
    return _STATUS[ours]


def _environment(rec: dict[str, Any]) -> dict[str, Any]:
    fp = rec.get("fingerprint") if isinstance(rec.get("fingerprint"), dict) else {}
    hardware = fp.get("gpu_name") or fp.get("name") or rec.get("device") or "unknown"
    libs = {k: str(v) for k, v in fp.items() if k in ("torch", "triton", "cuda", "driver", "driver_version")
            and v is not None}
    libs["kerneltraj_grader"] = str(rec.get("grader_version", "unknown"))
    return {"hardware": str(hardware), "libs": libs}


def _log(rec: dict[str, Any]) -> str:
    return (f"kerneltraj grader {rec.get('grader_version')} status={rec.get('status')} "
            f"reason_code={rec.get('reason_code')} reward={rec.get('reward')} "
            f"fingerprint={rec.get('fingerprint_id')} sharing={rec.get('sharing', 'isolated')} "
            f"reason={str(rec.get('reason', ''))[:2000]}")


def record_to_traces(rec: dict[str, Any], card: TaskCard | None = None,
                     exported_at: str | None = None) -> list[dict[str, Any]]:
    """The Trace dicts for one graded record ([] for statuses that are not exported)."""
    if _unexportable(rec):
        return []
    status = str(rec["status"])
    theirs = _status(rec)
    evaluation_base = {
        "status": theirs, "environment": _environment(rec),
        "timestamp": rec.get("graded_at") or exported_at or dt.datetime.now(dt.timezone.utc).isoformat(),
        "log": _log(rec),
    }
    inputs = {i.name: {"type": "random"} for i in card.inputs} if card is not None else {}
    solution = str(rec.get("solution_name") or rec["attempt_id"])
    sizes = [s for s in rec.get("sizes") or [] if not s.get("hidden")]
    out = []
    for s in sizes or [None]:
        key = s["size_key"] if s else ""
        ev = dict(evaluation_base)
        if theirs in ("PASSED", "INCORRECT_NUMERICAL"):
            ev["correctness"] = {"max_relative_error": NAN, "max_absolute_error": NAN, "extra": {
                "kerneltraj_status": status, "kerneltraj_reason_code": rec.get("reason_code"),
                "max_tolerance_ratio": _finite(s.get("max_rel_err") if s else None),
                "tolerances": rec.get("tolerances") or {}, "reward": rec.get("reward")}}
        if theirs == "PASSED":
            if not s or not _pos(s.get("cand_ms")) or not _pos(s.get("expert_ms")):
                continue  # PASSED needs performance: an untimed size cannot be a PASSED trace
            ev["performance"] = {"latency_ms": s["cand_ms"], "reference_latency_ms": s["expert_ms"],
                                 "speedup_factor": s["expert_ms"] / s["cand_ms"]}
        axes = _var_axes(card, parse_size_key(key))
        out.append({
            "definition": _definition(str(rec["task_id"])),
            "workload": {"axes": axes, "inputs": inputs,
                         "uuid": str(uuid.uuid5(uuid.NAMESPACE_URL,
                                                f"kerneltraj:{rec['attempt_id']}:{key}:{rec.get('seed', 0)}"))},
            "solution": solution,
            "evaluation": ev,
        })
    return out


def _unexportable(rec: dict[str, Any]) -> str | None:
    if not isinstance(rec.get("attempt_id"), str) or not isinstance(rec.get("task_id"), str):
        return "record lacks attempt_id or task_id"
    status = rec.get("status")
    if status in NOT_EXPORTED:
        return f"status {status} is not the candidate's doing and has no FlashInfer-Bench equivalent"
    return None if status in _STATUS else f"unknown status {str(status)[:40]!r}"


def _pos(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def export_traces(records: Iterable[dict[str, Any]], out: Path | IO[str],
                  cards: dict[str, TaskCard] | None = None, exported_at: str | None = None) -> ExportReport:
    """Write one JSON line per trace; returns counts and the records left out with why."""
    cards = cards or {}
    stamp = exported_at or dt.datetime.now(dt.timezone.utc).isoformat()
    n_records = n_traces = 0
    skipped: list[tuple[str, str]] = []
    fh = open(out, "w") if isinstance(out, (str, Path)) else out
    try:
        for rec in records:
            n_records += 1
            why = _unexportable(rec)
            traces = [] if why else record_to_traces(rec, cards.get(str(rec.get("task_id"))), stamp)
            if not traces:
                skipped.append((str(rec.get("attempt_id")), why or "no public timed size to export"))
            for t in traces:
                fh.write(json.dumps(t, sort_keys=True, allow_nan=False) + "\n")
                n_traces += 1
    finally:
        if isinstance(out, (str, Path)):
            fh.close()
    return ExportReport(n_records, n_traces, skipped)
