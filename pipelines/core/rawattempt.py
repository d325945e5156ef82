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
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-/ (),]{0,199}$")
"""Agent and model names: ASCII letters, digits, spaces and `_.:@+-/(),` (real model names carry spaces
and parentheses); no quote, square bracket, `<`, `|` or line break, which Markdown tables, HTML and
YAML front matter would read as markup. Where names are rendered they are escaped as well
(pipelines/core/markup.py)."""
_SCRIPT_SCHEME = re.compile(r"^(javascript|vbscript|data):", re.IGNORECASE)
"""A name is never a link target: names opening with a script-capable URL scheme are refused too."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def id_part(text: object, limit: int = 60) -> str:
    """A fragment safe inside our ids (charset of _ID, no `..`), never empty: importers build ids from corpus
    names with it, and the import registry its import ids."""
    s = _UNSAFE.sub("_", str(text))[:limit].strip("._-")
    s = re.sub(r"\.{2,}", ".", s)
    return s or "x"


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
    """Machine-readable reason: bad_json, missing_field, bad_type, bad_name, unknown_task, duplicate_id, ..."""
    reason: str
    """Human-readable reason naming the field and what to do."""
    raw_excerpt: str
    """First bytes of the raw row (decoded with replacement) for the auditor."""
    import_origin: str | None = None
    """For a row of an import's attempts file: the imported corpus's own file:line (None otherwise)."""
    duplicate_of: str | None = None
    """For a repeat of an admitted attempt (duplicate_id, duplicate_attempt): the attempt id it repeats."""


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
    for k in ("agent", "model"):
        if not _NAME.fullmatch(obj[k]) or _SCRIPT_SCHEME.match(obj[k]):
            raise RejectRow("bad_name", f"{k} must match {_NAME.pattern} and not open with a script URL "
                                        f"scheme, got {obj[k][:60]!r}")
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
    if obj.get("source_format") is not None and not isinstance(obj["source_format"], str):
        raise RejectRow("bad_type", "source_format must be a string (the corpus format) or null")
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
                seen_ids: set[str] | None = None, held_turns: dict[tuple[str, int], str] | None = None,
                held_contents: dict[tuple[str, str, str], tuple[str, str]] | None = None,
                ) -> Iterator[RawAttempt | Quarantined]:
    """Parse raw JSONL bytes; yields exactly one RawAttempt or Quarantined per non-blank line.

    With `held_turns` ((trajectory_id, turn) -> attempt id, shared across files as `seen_ids` is) a turn
    already held by an admitted attempt is quarantined too (duplicate_turn), and with `held_contents`
    (`content_key` -> (attempt id, origin)) a repeat of an admitted imported attempt (duplicate_attempt),
    as the ingest does."""
    known = set(known_tasks) if known_tasks is not None else None
    seen = seen_ids if seen_ids is not None else set()
    for lineno, raw in enumerate(lines, 1):
        item = parse_line(raw, f"{origin}:{lineno}", known, seen, held_turns, held_contents)
        if item is not None:
            yield item


def parse_line(raw: bytes, where: str, known: set[str] | None, seen: set[str] | None,
               turns: dict[tuple[str, int], str] | None = None,
               contents: dict[tuple[str, str, str], tuple[str, str]] | None = None,
               ) -> RawAttempt | Quarantined | None:
    """One raw line (no newline) at `where` (`file:line`): None if blank, else exactly one verdict.

    With `seen` None the repeat rules (`repeat_of`) are left to the caller (the bulk ingest settles them
    itself, first occurrence in file and line order, as this function would with one shared set and maps);
    with `turns` or `contents` None that rule does not apply."""
    if not raw.strip():
        return None
    excerpt = raw[:200].decode("utf-8", "replace")
    if len(raw) > MAX_LINE_BYTES:
        return Quarantined(where, None, "oversized_row", f"row is {len(raw)} bytes, over {MAX_LINE_BYTES}", excerpt)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Quarantined(where, None, "bad_encoding", f"row is not valid UTF-8 (byte {e.start})", excerpt)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, and over-long integer literals
        return Quarantined(where, None, "bad_json", f"row is not valid JSON: {str(e)[:120]}", excerpt)
    aid = obj.get("attempt_id") if isinstance(obj, dict) and isinstance(obj.get("attempt_id"), str) else None
    try:
        rec = parse_record(obj, known)
    except RejectRow as e:
        return Quarantined(where, aid, e.code, f"{aid or where}: {e}", excerpt)
    if seen is not None:
        content = content_key(rec.source_format, rec.task_id, rec.source_sha256)
        imported = import_origin_of(rec.extra) if content else None
        verdict = repeat_of(rec.attempt_id, rec.trajectory_id, rec.turn, content, imported or where, seen, turns,
                            contents)
        if verdict is not None:
            return repeat_row(where, rec.attempt_id, imported, verdict, excerpt)
    return dataclasses.replace(rec, origin=where)


OWN_FORMAT = "kerneltraj"
"""Our JSONL format: its attempt ids are the agent harness's own."""


def content_key(source_format: str | None, task_id: str, source_sha256: str) -> tuple[str, str, str] | None:
    """What makes two imported attempts one: the corpus format, the task and the source code. Importers make
    ids from file and folder names, so the same row in three files of a corpus (CUDA-L1 publishes one candidate
    per task in each GPU's file, often the same code) would be three attempts. None for our own format: there
    the harness names each attempt, and identical code in two trajectories is two samples (a row that leaves
    `source_format` null is ours too)."""
    return None if source_format is None or source_format == OWN_FORMAT else (source_format, task_id, source_sha256)


def import_origin_of(extra: dict[str, Any]) -> str | None:
    """The imported corpus's own file:line of a row of an import's attempts file (`kerneltraj import` keeps it in
    `extra`), the origin a person knows the row by; None for other rows."""
    value = extra.get("import_origin")
    return value if isinstance(value, str) and value else None


def repeat_of(attempt_id: str, trajectory_id: str, turn: int, content: tuple[str, str, str] | None, shown: str,
              seen: set[str], turns: dict[tuple[str, int], str] | None,
              contents: dict[tuple[str, str, str], tuple[str, str]] | None) -> tuple[str, str, str | None] | None:
    """(reason code, reason, the attempt it repeats) when an admissible row repeats an admitted one (file order,
    then line order); None admits it, and what it holds is recorded. The one rule of repeats, for the bulk
    ingest and parse_line alike:
    - duplicate_id: its attempt id is taken;
    - duplicate_attempt: an imported attempt with the same `content_key` (`shown` names this row's origin);
    - duplicate_turn: its (trajectory, turn) is held by another attempt, which would stop the release at the
      trajectories' blocking gate (unique trajectory and turn)."""
    if attempt_id in seen:
        return "duplicate_id", f"{attempt_id}: attempt_id already ingested; ids must be unique", attempt_id
    if content is not None and contents is not None:
        first = contents.get(content)
        if first is not None:
            return ("duplicate_attempt",
                    f"{attempt_id} at {shown} repeats {first[0]} at {first[1]}: the same {content[0]} attempt (task "
                    f"{content[1]}, source sha256 {content[2][:12]}); it is graded once, and the claims of both are "
                    "audited against that grade", first[0])
    if turns is not None:
        holder = turns.get((trajectory_id, turn))
        if holder is not None:
            return ("duplicate_turn", f"{attempt_id}: turn {turn} of trajectory {trajectory_id} is already held by "
                    f"attempt {holder}; a turn holds one attempt", None)
        turns[(trajectory_id, turn)] = attempt_id
    if content is not None and contents is not None:
        contents[content] = (attempt_id, shown)
    seen.add(attempt_id)
    return None


def repeat_row(where: str, attempt_id: str, import_origin: str | None, verdict: tuple[str, str, str | None],
               excerpt: str) -> Quarantined:
    """The quarantined row of a repeat (`repeat_of`'s verdict)."""
    code, reason, of = verdict
    return Quarantined(where, attempt_id, code, reason, excerpt, import_origin, of)


# ---- the bulk fast path: DuckDB decides the lines it can prove parse_record would admit unchanged ----
# `sql/ingest.sql` (`ingest.admissible`) reads a registered Arrow table `ingest_block(line_no, line)` and
# returns only lines that are strict JSON objects whose fields all pass parse_record's rules in their plain
# form; every other line (malformed, hostile, unusual: unknown keys, non-ASCII entry points, ...) goes to
# parse_line, so quarantine codes and messages stay the parser's own. DuckDB's JSON reader is more lenient
# than json.loads in two ways, both closed off: trailing commas (the query counts commas; see there) and
# NaN/Infinity spellings (typed fields reject non-finite numbers; `extra` is re-read by json.loads below).
EXTRA_MAX_DEPTH = 64
"""Deeper `extra` objects take the per-line parser (json.loads recursion limits decide there)."""
_ADMISSIBLE_PARAMS = {"max_line_bytes": MAX_LINE_BYTES + 1,  # +1: block lines keep their "\n"
                      "max_source_bytes": MAX_SOURCE_BYTES, "languages": list(LANGUAGES)}


def canonical_extra(text: str | None) -> str | None:
    """The stored `extra` text for a line whose `extra` value DuckDB re-serialised as `text` (None: absent),
    as attempt_row() writes it; None when json.loads would not read it the same way (NaN spellings it
    refuses, over-long integers, deep nesting) or it is not an object."""
    try:
        obj = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    if obj is None:
        obj = {}
    if type(obj) is not dict or _depth(obj, EXTRA_MAX_DEPTH) > EXTRA_MAX_DEPTH:
        return None
    return json.dumps(obj, sort_keys=True, default=str)


def _depth(v: Any, limit: int, here: int = 1) -> int:
    if here > limit:
        return here
    items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
    return max((_depth(x, limit, here + 1) for x in items if isinstance(x, (dict, list))), default=here)


def admissible_rows(con: Any, block: Any, known_tasks: Iterable[str], load_sql: Any) -> Any:
    """The lines of `block` (Arrow: line_no, line; every line ending in "\\n") that parse_record admits
    unchanged, as Arrow columns of raw_attempts (without origin/input/run columns) plus line_no.

    Lines left out are not judged: the caller sends them to parse_line."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = block.column("line").combine_chunks()
    block = block.append_column("line_commas", pa.array(_commas(lines)))
    # Batches of 2,048 rows: DuckDB scans an Arrow table one batch per thread.
    con.register("ingest_block", pa.Table.from_batches(block.to_batches(max_chunksize=2048)))
    try:
        rows = con.sql(load_sql("ingest.admissible"),
                       params={**_ADMISSIBLE_PARAMS, "known_tasks": sorted(known_tasks)}).to_arrow_table()
    finally:
        con.unregister("ingest_block")
    if rows.num_rows == 0:
        return rows.drop_columns(["extra_json", "source_commas"])
    # `extra`: few distinct values in practice, so json.loads/json.dumps run once per distinct text.
    codes = pc.dictionary_encode(rows.column("extra_json").combine_chunks())
    canon = [canonical_extra(t) for t in codes.dictionary.to_pylist()]
    extra = pc.take(pa.array(canon, pa.string()), codes.indices)
    if codes.null_count:  # absent `extra`
        extra = pc.if_else(pc.is_null(codes.indices), "{}", extra)
    source = rows.column("source").combine_chunks()
    keep = pc.and_(pc.is_valid(extra), pc.equal(pa.array(_commas(source)), rows.column("source_commas")))
    rows = rows.drop_columns(["extra_json", "source_commas"]).append_column("extra", extra)
    if not pc.all(keep).as_py():
        rows = rows.filter(keep)
        source = rows.column("source").combine_chunks()
    return rows.append_column("source_sha256", _sha256_hex(source))


def _offsets(strings: Any) -> Any:
    import numpy as np

    kind = np.int64 if str(strings.type).startswith("large") else np.int32
    return np.frombuffer(strings.buffers()[1], kind)[strings.offset:strings.offset + len(strings) + 1]


def _commas(strings: Any) -> Any:
    """Commas per string of an Arrow string array (vectorised: positions, then a search per boundary)."""
    import numpy as np

    offs = _offsets(strings).astype(np.int64)
    data = np.frombuffer(strings.buffers()[2] or b"", np.uint8)
    at = np.flatnonzero(data[offs[0]:offs[-1]] == 44) + offs[0]
    return np.diff(np.searchsorted(at, offs)).astype(np.int64)


def _sha256_hex(strings: Any) -> Any:
    """Lower-case hex SHA-256 of each UTF-8 string, as RawAttempt.source_sha256 (hashlib, no per-row str)."""
    import numpy as np
    import pyarrow as pa

    offs = _offsets(strings).tolist()
    data = memoryview(strings.buffers()[2] or b"")
    sha = hashlib.sha256
    hexes = b"".join(sha(data[a:b]).digest() for a, b in zip(offs[:-1], offs[1:])).hex().encode()
    return pa.StringArray.from_buffers(len(strings), pa.py_buffer(np.arange(0, 64 * len(strings) + 1, 64, np.int32)),
                                       pa.py_buffer(hexes))
