"""Importers of real corpora: each turns one foreign format into our contracts.

Every importer exposes `import_path(paths) -> ImportBatch`. Every attempt-bearing source record
ends as exactly one `RawAttempt` or one `Quarantined` row (never an exception); tasks the records
bring become `TaskCard`s, and whatever the source *claims* (speedups, statuses, latencies) is kept
as claims, never as grades. Files are streamed: at most one file's records are held at once.

Admission of each attempt goes through `pipelines.core.rawattempt.parse_record`, so foreign rows obey
the same id, size and encoding rules as our own JSONL.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grader.taskcard import TaskCard
from pipelines.core.rawattempt import Quarantined, RawAttempt, RejectRow, id_part, parse_record

EXCERPT_BYTES = 200


@dataclass(frozen=True)
class FieldProblem:
    """A field of a kept record that could not be read as its type: kept as null, and said at import time."""

    origin: str
    """File and line (or record key) of the record."""
    field: str
    """The field, e.g. `runtime` or `score_default`."""
    problem: str
    """What is wrong with it, e.g. `is 'fast' (str), not a number`."""


def type_problem(value: Any, wanted: str) -> str:
    """`is <value> (<type>), not <wanted>` for a FieldProblem."""
    return f"is {_dump_short(value)} ({type(value).__name__}), not {wanted}"


def problems_of(claims: list[dict[str, Any]]) -> list[FieldProblem]:
    """The FieldProblems of claims: an importer keeps a wrongly typed field of a claim as null and names it in
    the claim's `unreadable_fields` ({field: problem})."""
    return [FieldProblem(str(c.get("origin")), k, why)
            for c in claims for k, why in c.get("unreadable_fields", {}).items()]


def _dump_short(value: Any) -> str:
    try:
        text = json.dumps(value, default=str)
    except (ValueError, RecursionError):
        text = repr(type(value))
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True)
class ImportBatch:
    """What one importer made of a set of paths."""

    format: str
    """Importer name: `cuda-l1`, `kernelbench` or `flashinfer-bench`."""
    attempts: list[RawAttempt]
    """Admitted attempts, one per accepted attempt-bearing record."""
    quarantined: list[Quarantined]
    """Attempt-bearing records that were refused, each with a reason code."""
    cards: list[TaskCard]
    """Task cards for the tasks these records bring (one per task id)."""
    claims: list[dict[str, Any]]
    """What the source reports about attempts (speedups, statuses, latencies): claims, not grades."""
    rejected: list[Quarantined] = field(default_factory=list)
    """Non-attempt records that could not be used (task definitions that cannot become cards,
    malformed trace lines), each with a reason code; attempts on such tasks are quarantined."""
    problems: list[FieldProblem] = field(default_factory=list)
    """Fields of kept records (attempts, claims) that had the wrong type and are kept as null."""

    @property
    def n_records(self) -> int:
        """Attempt-bearing records seen: admitted plus quarantined."""
        return len(self.attempts) + len(self.quarantined)


class TaskReject(Exception):
    """Why a task could not become a card (kept so its attempts are quarantined with the reason)."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code = code
        """Machine-readable reason: inputs_not_expressible, multi_output, probe_failed, ..."""
        self.reason = reason
        """Human-readable detail."""


def sha256_hex(data: bytes | str) -> str:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")).hexdigest()


def excerpt(raw: bytes | str) -> str:
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    return raw[:EXCERPT_BYTES].decode("utf-8", "replace")


def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw bytes without the newline) for every line, streamed."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            yield n, raw.rstrip(b"\r\n")


def admit(obj: dict[str, Any], where: str, raw: bytes | str, seen: set[str]) -> RawAttempt | Quarantined:
    """Validate a mapped record through the shared contract; duplicates and rejects become rows."""
    aid = obj.get("attempt_id") if isinstance(obj.get("attempt_id"), str) else None
    try:
        rec = parse_record(obj)
    except RejectRow as e:
        return Quarantined(where, aid, e.code, f"{aid or where}: {e}", excerpt(raw))
    except (ValueError, TypeError, ArithmeticError, RecursionError) as e:  # parse_record must not crash us
        return Quarantined(where, aid, "bad_record", f"{aid or where}: {type(e).__name__}: {str(e)[:160]}",
                           excerpt(raw))
    if rec.attempt_id in seen:
        return Quarantined(where, rec.attempt_id, "duplicate_id",
                           f"{rec.attempt_id}: attempt_id already ingested; ids must be unique", excerpt(raw))
    seen.add(rec.attempt_id)
    return dataclasses.replace(rec, origin=where)


def write_cards(cards: list[TaskCard], path: Path) -> None:
    """Cards as JSON lines, the form `grader.catalogue.load_catalogue(extra=[path])` reads."""
    with open(path, "w") as f:
        for card in cards:
            f.write(json.dumps(dataclasses.asdict(card), sort_keys=True) + "\n")


def quarantine(where: str, aid: str | None, code: str, reason: str, raw: bytes | str) -> Quarantined:
    return Quarantined(where, aid, code, f"{aid or where}: {reason}", excerpt(raw))


from pipelines.importers import cuda_l1, flashinfer, kernelbench  # noqa: E402  (need ImportBatch first)

IMPORTERS = {
    "cuda-l1": cuda_l1,
    "kernelbench": kernelbench,
    "flashinfer-bench": flashinfer,
}
"""Importer name -> module exposing `import_path(paths: list[Path]) -> ImportBatch`."""

LAYOUTS = {
    "cuda-l1": ("file", ("CUDA-L1 JSON-lines files, one per GPU (e.g. ../shared/data/cuda-l1/h100.jsonl), "
                         "or folders of them")),
    "kernelbench": ("folder", ("KernelBench run folders (level_L_problem_P_sample_S_kernel.py, eval_results.json) "
                               "together with the KernelBench problems folder (level1/, level2/, ...) that "
                               "defines their tasks")),
    "flashinfer-bench": ("folder", ("FlashInfer-Bench trace-set folders holding definitions/, solutions/ and "
                                    "traces/ (e.g. ../shared/data/flashinfer-trace)")),
}
"""Importer name -> (what a path may be: `file` (or a folder of files) or `folder`, what it holds)."""

TASKS_FROM = {
    "cuda-l1": "each row's ref_code",
    "kernelbench": "the KernelBench problems folder, holding level1/, level2/, ..., given beside the run folders",
    "flashinfer-bench": "the trace set's definitions/ folder",
}
"""Importer name -> where its task definitions come from (said when attempts arrive without cards)."""

UNDECODABLE = frozenset({"bad_encoding", "bad_json"})
"""Reason codes of records that are not text of the format at all (as opposed to a bad field)."""


def repeated_attempts(batch: ImportBatch) -> list[tuple[str, str]]:
    """(origin, origin of the earlier one) for each attempt that repeats an earlier attempt's task and source
    (`pipelines.core.rawattempt.content_key`): the ingest keeps one and quarantines the others as duplicate_attempt."""
    from pipelines.core.rawattempt import content_key

    first: dict[tuple[str, str, str], str] = {}
    out = []
    for a in batch.attempts:
        key = content_key(a.source_format, a.task_id, a.source_sha256)
        if key is None:
            continue
        if key in first:
            out.append((a.origin, first[key]))
        else:
            first[key] = a.origin
    return out


def path_problem(fmt: str, paths: list[Path]) -> str | None:
    """Why these paths cannot be an import of `fmt` before reading them (None: go ahead)."""
    kind, layout = LAYOUTS[fmt]
    for p in paths:
        if not p.exists():
            return f"{p} does not exist; {fmt} reads {layout}"
        if kind == "folder" and not p.is_dir():
            return f"{p} is a file, but {fmt} reads folders: {layout}"
    return None


def undecodable_files(batch: ImportBatch) -> dict[str, tuple[int, int]]:
    """Source files most of whose records (at least 5) do not decode: {file: (undecodable, records)}.
    Such a file is the wrong file or the wrong format; quarantining its noise row by row would fill
    the quarantine table (and the release) with it."""
    per: dict[str, list[int]] = {}
    for origin, code in ([(a.origin, None) for a in batch.attempts]
                         + [(q.origin, q.reason_code) for q in batch.quarantined + batch.rejected]):
        counts = per.setdefault(origin.rsplit(":", 1)[0], [0, 0])
        counts[0] += code in UNDECODABLE
        counts[1] += 1
    return {f: (bad, n) for f, (bad, n) in per.items() if n >= 5 and 2 * bad > n}


def refusal(batch: ImportBatch, paths: list[Path]) -> str | None:
    """Why nothing of this batch may be kept (None: keep it): no records at all, or undecodable files."""
    shown = ", ".join(map(str, paths[:3])) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    if not batch.n_records and not batch.cards and not batch.claims and not batch.rejected:
        return f"found no {batch.format} records in {shown}; {batch.format} reads {LAYOUTS[batch.format][1]}"
    refused = undecodable_files(batch)
    if refused:
        path, (bad, total) = next(iter(refused.items()))
        also = f" (and {len(refused) - 1} more such file(s))" if len(refused) > 1 else ""
        return (f"{path} is not a {batch.format} corpus: {bad} of its {total} records are not decodable JSON "
                f"text{also}; nothing was imported (check the format name and the file)")
    return None


__all__ = ["IMPORTERS", "LAYOUTS", "TASKS_FROM", "FieldProblem", "ImportBatch", "TaskReject", "id_part", "path_problem",
           "problems_of", "refusal", "repeated_attempts"]
