"""What every importer shares: the batch it returns, a task's refusal, and the one way a record is decoded,
admitted through the raw-attempt contract or quarantined with a reason.

Every attempt-bearing source record ends as exactly one `RawAttempt` or one `Quarantined` row (never an
exception). Admission goes through `pipelines.core.rawattempt.parse_record`, so foreign rows obey the same id,
size and encoding rules as our own JSONL."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from grader.taskcard import TaskCard
from pipelines.core.rawattempt import Quarantined, RawAttempt, RejectRow, parse_record

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


class Undecodable(ValueError):
    """A record that is not one JSON object of bounded size (too large, not UTF-8, not JSON, not an object)."""

    def __init__(self, code: str, reason: str):
        super().__init__(f"{code}: {reason}")
        self.code = code
        """Reason code: oversized_row, bad_encoding, bad_json or bad_type."""
        self.reason = reason
        """What is wrong, for a person."""


def decode_object(raw: bytes, max_bytes: int, what: str = "record") -> dict[str, Any]:
    """One JSON object from the bytes of a record (a line, a file); raises Undecodable saying why it is not one."""
    if len(raw) > max_bytes:
        raise Undecodable("oversized_row", f"{what} is {len(raw)} bytes, over {max_bytes}")
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise Undecodable("bad_encoding", f"{what} is not valid UTF-8 (byte {e.start})") from None
    except (ValueError, RecursionError) as e:  # ValueError also covers over-long integer literals
        raise Undecodable("bad_json", f"{what} is not valid JSON: {str(e)[:120]}") from None
    if not isinstance(obj, dict):
        raise Undecodable("bad_type", f"a {what} must be a JSON object, got {type(obj).__name__}")
    return obj


def decoded_or_quarantined(raw: bytes, where: str, max_bytes: int,
                           what: str = "record") -> dict[str, Any] | Quarantined:
    """decode_object, or the quarantine row of a record that is not one object."""
    try:
        return decode_object(raw, max_bytes, what)
    except Undecodable as e:
        return quarantine(where, None, e.code, e.reason, raw)
