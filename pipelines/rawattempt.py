"""The raw-attempt contract: one agent attempt as it arrives, and the parser that admits it.

Every line of an attempt file ends as exactly one of: an accepted `RawAttempt`, or a
`Quarantined` row naming the record and the reason. Nothing is dropped silently.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from grader.contract import MAX_SOURCE_BYTES

LANGUAGES = ("triton", "pytorch", "cuda")
MAX_LINE_BYTES = 4 * MAX_SOURCE_BYTES
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-/]{0,199}$")


@dataclass(frozen=True)
class RawAttempt:
    """One agent attempt at one task, as ingested."""

    attempt_id: str
    """Unique, stable id; the lineage key of every downstream row."""
    task_id: str
    agent: str
    """Agent (harness) name, e.g. `kestrel`."""
    model: str
    """Model behind the agent, e.g. `demo-coder-7b`."""
    trajectory_id: str
    """Multi-turn episode this attempt belongs to."""
    turn: int
    """1-based position within the trajectory."""
    language: str
    """`triton`, `pytorch` or `cuda`."""
    source: str
    entry_point: str = "run"
    generation_tokens: int | None = None
    """Tokens the agent spent producing this attempt."""
    generation_budget_tokens: int | None = None
    """Declared token budget of the turn."""
    started_at: str | None = None
    """ISO-8601 UTC time the agent started the turn."""
    finished_at: str | None = None
    source_format: str = "kerneltraj"
    """Which importer produced the row (`kerneltraj`, `cuda-l1`, `kernelbench`, `flashinfer-bench`)."""
    claimed_speedup: float | None = None
    """A speedup the source claims for this attempt (kept as a claim, never as a grade)."""
    origin: str = ""
    """File and line (or record key) the attempt came from."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Source fields kept for lineage that have no column of their own."""

    @property
    def source_sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()


@dataclass(frozen=True)
class Quarantined:
    """A row that could not be admitted, with the reason and enough to find it again."""

    origin: str
    """File and line (or record key) of the row."""
    attempt_id: str | None
    """The id, when one could be read."""
    reason_code: str
    """Machine-readable reason: bad_json, missing_field, bad_type, unknown_task, duplicate_id, ..."""
    reason: str
    """Human-readable reason naming the field and what to do."""
    raw_excerpt: str
    """First bytes of the raw row (decoded with replacement) for the auditor."""


class RejectRow(ValueError):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


_REQUIRED = ("attempt_id", "task_id", "agent", "model", "trajectory_id", "turn", "language", "source")
_FIELDS = {f.name for f in dataclasses.fields(RawAttempt)}


def parse_record(obj: Any, known_tasks: Iterable[str] | None = None) -> RawAttempt:
    """Validate one decoded JSON object; raise RejectRow naming the field and the reason."""
    if not isinstance(obj, dict):
        raise RejectRow("bad_type", f"a row must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in _REQUIRED if k not in obj or obj[k] is None]
    if missing:
        raise RejectRow("missing_field", f"missing required field(s): {', '.join(missing)}")
    for k in ("attempt_id", "task_id", "trajectory_id"):
        if not isinstance(obj[k], str) or not _ID.fullmatch(obj[k]):
            raise RejectRow("bad_id", f"{k} must match {_ID.pattern}, got {str(obj[k])[:60]!r}")
        if ".." in obj[k]:
            raise RejectRow("bad_id", f"{k} must not contain '..'")
    for k in ("agent", "model", "language", "entry_point"):
        if k in obj and not (isinstance(obj[k], str) and 0 < len(obj[k]) <= 200):
            raise RejectRow("bad_type", f"{k} must be a non-empty string of at most 200 characters")
        if k in obj and not _clean_text(obj[k]):
            raise RejectRow("bad_encoding", f"{k} holds NUL bytes or unpaired surrogates")
    if obj["language"] not in LANGUAGES:
        raise RejectRow("bad_language", f"language {obj['language']!r} is not one of {LANGUAGES}")
    if "entry_point" in obj and not obj["entry_point"].isidentifier():
        raise RejectRow("bad_type", f"entry_point {obj['entry_point']!r} is not a Python identifier")
    turn = obj["turn"]
    if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= 10_000:
        raise RejectRow("bad_type", f"turn must be an integer in 1..10000, got {turn!r}")
    src = obj["source"]
    if not isinstance(src, str):
        raise RejectRow("bad_type", "source must be a string")
    n = len(src.encode("utf-8", "surrogatepass"))
    if n > MAX_SOURCE_BYTES:
        raise RejectRow("oversized_source", f"source is {n} bytes, over the {MAX_SOURCE_BYTES}-byte limit")
    if "\x00" in src:
        raise RejectRow("bad_source", "source contains NUL bytes")
    try:
        src.encode("utf-8")
    except UnicodeEncodeError:
        raise RejectRow("bad_encoding", "source holds unpaired surrogates (not valid UTF-8)") from None
    for k in ("generation_tokens", "generation_budget_tokens"):
        v = obj.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**62):
            raise RejectRow("bad_type", f"{k} must be a non-negative integer below 2**62 or null")
    for k in ("started_at", "finished_at"):
        v = obj.get(k)
        if v is not None:
            if not isinstance(v, str):
                raise RejectRow("bad_timestamp", f"{k} must be an ISO-8601 string, got {type(v).__name__}")
            try:
                dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
            except ValueError:
                raise RejectRow("bad_timestamp", f"{k} {str(v)[:40]!r} is not ISO-8601") from None
    cs = obj.get("claimed_speedup")
    if cs is not None and (isinstance(cs, bool) or not isinstance(cs, (int, float)) or not 0 < cs < 1e300):
        raise RejectRow("bad_type", "claimed_speedup must be a positive finite number or null")
    if obj.get("extra") is not None and not isinstance(obj["extra"], dict):
        raise RejectRow("bad_type", "extra must be a JSON object or null")
    if known_tasks is not None and obj["task_id"] not in known_tasks:
        raise RejectRow("unknown_task", f"task_id {obj['task_id']!r} is not in the catalogue; import the task first")
    extra = {k: v for k, v in obj.items() if k not in _FIELDS}
    extra.update(obj.get("extra") or {})
    kwargs = {k: obj[k] for k in _FIELDS if k in obj and k != "extra"}
    if kwargs.get("claimed_speedup") is not None:
        kwargs["claimed_speedup"] = float(kwargs["claimed_speedup"])
    return RawAttempt(**kwargs, extra=extra)


def _clean_text(v: str) -> bool:
    if "\x00" in v:
        return False
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse_lines(lines: Iterable[bytes], origin: str, known_tasks: Iterable[str] | None = None,
                seen_ids: set[str] | None = None) -> Iterator[RawAttempt | Quarantined]:
    """Parse raw JSONL bytes; yields exactly one RawAttempt or Quarantined per non-blank line."""
    known = set(known_tasks) if known_tasks is not None else None
    seen = seen_ids if seen_ids is not None else set()
    for lineno, raw in enumerate(lines, 1):
        where = f"{origin}:{lineno}"
        if not raw.strip():
            continue
        excerpt = raw[:200].decode("utf-8", "replace")
        if len(raw) > MAX_LINE_BYTES:
            yield Quarantined(where, None, "oversized_row", f"row is {len(raw)} bytes, over {MAX_LINE_BYTES}", excerpt)
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield Quarantined(where, None, "bad_encoding", f"row is not valid UTF-8 (byte {e.start})", excerpt)
            continue
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, and over-long integer literals
            yield Quarantined(where, None, "bad_json", f"row is not valid JSON: {str(e)[:120]}", excerpt)
            continue
        aid = obj.get("attempt_id") if isinstance(obj, dict) and isinstance(obj.get("attempt_id"), str) else None
        try:
            rec = parse_record(obj, known)
        except RejectRow as e:
            yield Quarantined(where, aid, e.code, f"{aid or where}: {e}", excerpt)
            continue
        if rec.attempt_id in seen:
            yield Quarantined(where, rec.attempt_id, "duplicate_id",
                              f"{rec.attempt_id}: attempt_id already ingested; ids must be unique", excerpt)
            continue
        seen.add(rec.attempt_id)
        yield dataclasses.replace(rec, origin=where)
