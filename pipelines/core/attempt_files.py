"""Raw attempt files into the warehouse: every line of every file ends as exactly one admitted attempt or one
quarantined row, in memory bounded by a block of the file, with the origins (file:line) a user can look up."""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import duckdb

from pipelines.core.rawattempt import (OWN_FORMAT, Quarantined, RawAttempt, admissible_rows, content_key,
                                       import_origin_of, parse_line, parse_lines, repeat_of, repeat_row)
from pipelines.core.settings import demo_dir
from pipelines.core.warehouse import insert_rows, load_sql, registered, run_script


def display_path(path: Path) -> str:
    """The embedded demo corpus by its place in the package (`demo/attempts.jsonl`), so its origins are the same
    on every install; any other file by its absolute path."""
    path, demo = path.resolve(), demo_dir().resolve()
    return f"demo/{path.relative_to(demo).as_posix()}" if path.is_relative_to(demo) else str(path)


def attempt_row(a: RawAttempt, input_sha256: str, run_id: str, now: dt.datetime) -> dict:
    d = dataclasses.asdict(a)
    d["extra"] = json.dumps(d["extra"], sort_keys=True, default=str)
    return {**d, "source_sha256": a.source_sha256, "input_sha256": input_sha256, "run_id": run_id,
            "ingested_at": now}


def quarantine_row(q: Quarantined, input_sha256: str, run_id: str, now: dt.datetime,
                   import_origin: str | None = None) -> dict:
    return {**dataclasses.asdict(q), "import_origin": import_origin or q.import_origin, "input_sha256": input_sha256,
            "run_id": run_id, "ingested_at": now}


def imported_quarantine(data: bytes, where: str) -> list[tuple[Quarantined, str | None]]:
    """Rows an importer refused (one Quarantined as JSON per line), re-homed to this file's lines.

    The importer's own origin is kept as `import_origin`; a line that is not a valid row is itself
    quarantined, so every line still ends as exactly one row."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        here = f"{where}:{n}"
        try:
            d = json.loads(raw)
            q = Quarantined(here, d.get("attempt_id"), str(d["reason_code"]), str(d["reason"]),
                            str(d.get("raw_excerpt", "")))
            out.append((q, str(d.get("origin") or "") or None))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            out.append((Quarantined(here, None, "bad_quarantine_row", f"not a quarantined-row record: {e}",
                                    raw[:200].decode("utf-8", "replace")), None))
    return out


BLOCK_BYTES = 32 << 20
"""JSONL read per DuckDB block (whole lines): bounds the stage's memory whatever the file size."""


def load_attempt_files(con: duckdb.DuckDBPyConnection, paths: list[Path], known_tasks: set[str], run_id: str,
                       now: dt.datetime, log: Callable[[str], None] | None = None) -> list[dict]:
    """Every line of every file into `raw_attempts` or `quarantine` (in the caller's transaction); returns
    the `input_files` rows. Same rows, verdicts and messages as parse_lines over the files in order with one
    shared set of seen ids and maps of held turns and contents: DuckDB admits the lines it can prove admissible,
    parse_line judges the rest, and `repeat_of` judges repeats: an attempt at a (trajectory, turn) an earlier one
    holds is quarantined (duplicate_turn), so no admitted row can fail the trajectories' blocking gate downstream,
    and an imported attempt that repeats an admitted one's task and source is quarantined (duplicate_attempt)
    naming both origins, so the same corpus row in three files is one attempt.

    Admitted rows reach the warehouse as one streamed INSERT (Arrow batches pulled block by block), so
    DuckDB writes finished row groups to disk as it goes: memory stays bounded by the block size (plus the
    set of seen ids), not by the input. A scratch in-memory DuckDB judges the blocks meanwhile."""
    import pyarrow as pa

    threads = int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])
    with duckdb.connect() as scratch, ThreadPoolExecutor(1) as hasher:
        scratch.execute(f"SET threads = {threads}")
        scratch.execute(f"SET memory_limit = '{SCRATCH_MEMORY}'")
        scratch.execute("SET temp_directory = $dir", {"dir": str(Path(tempfile.gettempdir()) / "kerneltraj-ingest")})
        # hashlib releases the GIL: whole-file digests run beside the parsing.
        loader = _Loader(scratch, paths, [hasher.submit(_file_digest, p) for p in paths], known_tasks, run_id, now)
        stream = pa.RecordBatchReader.from_batches(ADMITTED, loader.admitted_batches())
        with registered(con, "ingest_admitted", stream):
            run_script(con, "ingest.insert_admitted", {"run_id": run_id, "ingested_at": now})
    insert_rows(con, "raw_attempts", loader.slow_rows)
    insert_rows(con, "quarantine", loader.quarantined)
    for f in loader.files:
        if log:
            log(f"{f['path']}: {f['accepted']} attempts, {f['quarantined']} quarantined (sha256 {f['sha256'][:12]})")
    return loader.files


SCRATCH_MEMORY = "512MB"
"""DuckDB memory limit of the scratch database that judges blocks (it spills to disk beyond)."""
ADMITTED_COLUMNS = (("attempt_id", "string"), ("task_id", "string"), ("agent", "string"), ("model", "string"),
                    ("trajectory_id", "string"), ("turn", "int32"), ("language", "string"),
                    ("entry_point", "string"), ("source", "string"), ("source_sha256", "string"),
                    ("source_format", "string"), ("generation_tokens", "int64"),
                    ("generation_budget_tokens", "int64"), ("started_at", "string"), ("finished_at", "string"),
                    ("claimed_speedup", "float64"), ("origin", "string"), ("input_sha256", "string"),
                    ("extra", "string"))


def _admitted_schema():
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in ADMITTED_COLUMNS])


ADMITTED = _admitted_schema()
"""Arrow schema of the streamed fast-path rows (the raw_attempts columns attempt_row() fills per row)."""


class _Loader:
    """Reads the files block by block: fast-path rows are yielded as Arrow batches for the streamed insert;
    parse_line's verdicts on the other lines, duplicate ids and turns, and the per-file counts are kept."""

    def __init__(self, scratch, paths: list[Path], digests: list, known: set[str], run_id: str, now: dt.datetime):
        self.scratch, self.paths, self.digests, self.known = scratch, paths, digests, known
        self.run_id, self.now = run_id, now
        self.seen: set[str] = set()  # ids admitted so far, as parse_lines' shared set
        self.turns: dict[tuple[str, int], str] = {}  # (trajectory, turn) -> the admitted attempt holding it
        self.contents: dict[tuple[str, str, str], tuple[str, str]] = {}  # content_key -> (attempt id, origin)
        self.slow_rows: list[dict] = []
        self.quarantined: list[dict] = []
        self.files: list[dict] = []

    def admitted_batches(self):
        displays: list[str] = []
        for path, digest in zip(self.paths, self.digests):
            display = display_path(path)
            counts = {"accepted": 0, "quarantined": 0, "nonblank_lines": 0}
            if display in displays:  # the same file twice: the row-by-row parser, against every id so far
                self._rowwise(path, display, digest.result()[0], counts)
            else:
                yield from self._file(path, display, digest, counts)
            displays.append(display)
            sha, size = digest.result()
            self.files.append({"path": display, "sha256": sha, "size_bytes": size, **counts,
                               "run_id": self.run_id, "ingested_at": self.now})

    def _file(self, path: Path, display: str, digest, counts: dict):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        for data, offs, first, _ in _blocks(path, BLOCK_BYTES):
            n = len(offs) - 1
            whole = n - (not data.endswith(b"\n"))  # lines ending in a newline go to DuckDB; a last one without, not
            fast = self._fast(data, offs, first, whole)
            fast_at = fast.column("line_no").to_numpy() - first if fast is not None else np.zeros(0, np.int64)
            done = np.zeros(n, bool)
            done[fast_at] = True
            sha = digest.result()[0]
            # parse_line on the other lines, then every admitted row in line order against what is held so far.
            admitted: list[tuple[int, str, str, int, RawAttempt | None]] = []
            imported: dict[int, tuple[tuple[str, str, str], str | None]] = {}  # line -> (content_key, import origin)
            for i in np.flatnonzero(~done).tolist():
                item = parse_line(_line(data, offs, i), f"{display}:{first + i}", self.known, None)
                if item is None:
                    continue
                counts["nonblank_lines"] += 1
                if isinstance(item, RawAttempt):
                    admitted.append((i, item.attempt_id, item.trajectory_id, item.turn, item))
                    content = content_key(item.source_format, item.task_id, item.source_sha256)
                    if content:
                        imported[i] = (content, import_origin_of(item.extra))
                else:
                    self.quarantined.append(quarantine_row(item, sha, self.run_id, self.now))
                    counts["quarantined"] += 1
            counts["nonblank_lines"] += len(fast_at)
            if len(fast_at):
                admitted += zip(fast_at.tolist(), fast.column("attempt_id").to_pylist(),
                                fast.column("trajectory_id").to_pylist(), fast.column("turn").to_pylist(),
                                [None] * len(fast_at))
                admitted.sort(key=lambda a: a[0])
                imported.update(_imported_rows(fast, first))
            keep = np.ones(len(fast_at), bool)
            fast_pos = {i: k for k, i in enumerate(fast_at.tolist())}
            for i, aid, traj, turn, item in admitted:
                content, origin = imported.get(i, (None, None))
                where = f"{display}:{first + i}"
                verdict = repeat_of(aid, traj, turn, content, origin or where, self.seen, self.turns, self.contents)
                if verdict is not None:
                    q = repeat_row(where, aid, origin, verdict, _line(data, offs, i)[:200].decode("utf-8", "replace"))
                    self.quarantined.append(quarantine_row(q, sha, self.run_id, self.now))
                    counts["quarantined"] += 1
                    if item is None:
                        keep[fast_pos[i]] = False
                    continue
                counts["accepted"] += 1
                if item is not None:
                    self.slow_rows.append(attempt_row(item, sha, self.run_id, self.now))
            if len(fast_at):
                if not keep.all():
                    fast = fast.filter(pa.array(keep))
                origin = pc.binary_join_element_wise(display + ":", pc.cast(fast.column("line_no"), pa.string()), "")
                out = fast.append_column("origin", origin).append_column(
                    "input_sha256", pa.array(np.full(fast.num_rows, sha, dtype=object), pa.string()))
                yield from out.select(ADMITTED.names).cast(ADMITTED).to_batches()

    def _fast(self, data: bytes, offs, first: int, whole: int):
        """The fast path's admitted rows of a block (None when no line ends in a newline)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not whole:
            return None
        binary = pa.BinaryArray.from_buffers(pa.binary(), whole, [None, pa.py_buffer(offs[:whole + 1].astype(np.int32)),
                                                                  pa.py_buffer(data)])
        try:
            lines = binary.cast(pa.string())
        except pa.ArrowInvalid:  # invalid UTF-8 somewhere: those lines go to parse_line, the rest as usual
            ok = [_utf8(data[offs[i]:offs[i + 1]]) for i in range(whole)]
            lines = pc.if_else(pa.array(ok), binary, pa.scalar(b"", pa.binary())).cast(pa.string())
        block = pa.table({"line_no": pa.array(np.arange(first, first + whole, dtype=np.int64)), "line": lines})
        return admissible_rows(self.scratch, block, self.known, load_sql)

    def _rowwise(self, path: Path, display: str, sha: str, counts: dict) -> None:
        """parse_lines over a whole file with the shared seen ids, turns and contents (a file listed twice)."""
        data = path.read_bytes()
        for item in parse_lines(data.split(b"\n"), display, self.known, self.seen, self.turns, self.contents):
            if isinstance(item, RawAttempt):
                self.slow_rows.append(attempt_row(item, sha, self.run_id, self.now))
                counts["accepted"] += 1
            else:
                self.quarantined.append(quarantine_row(item, sha, self.run_id, self.now))
                counts["quarantined"] += 1
        counts["nonblank_lines"] = sum(1 for ln in data.split(b"\n") if ln.strip())


def _imported_rows(fast, first: int) -> dict[int, tuple[tuple[str, str, str], str | None]]:
    """Line of the block (from 0; the block opens at line `first`) -> (content_key, import origin) of the fast
    path's rows of imported formats; our own rows (most of a large ingest) are skipped by one vectorised test."""
    import numpy as np
    import pyarrow.compute as pc

    own = pc.fill_null(pc.equal(fast.column("source_format"), OWN_FORMAT), True)
    rows = fast.take(np.flatnonzero(~own.to_numpy(zero_copy_only=False)))
    out = {}
    for i, fmt, task, sha, extra in zip(*(rows.column(c).to_pylist() for c in (
            "line_no", "source_format", "task_id", "source_sha256", "extra"))):
        out[i - first] = (content_key(fmt, task, sha), import_origin_of(json.loads(extra)))
    return out


def _line(data: bytes, offs, i: int) -> bytes:
    """Line i of a block, without its newline (what data.split(b"\\n") gives)."""
    raw = data[offs[i]:offs[i + 1]]
    return raw[:-1] if raw.endswith(b"\n") else raw


def _file_digest(path: Path) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def _blocks(path: Path, block_bytes: int):
    """(data, line start offsets + end, number of the first line, byte offset of data) per block of whole
    lines; the last block may end without a newline. One copy of the bytes at most per block."""
    import numpy as np

    carry, base, first_line = b"", 0, 1
    with open(path, "rb") as f:
        while True:
            chunk = f.read(block_bytes)
            cut = chunk.rfind(b"\n") + 1
            if chunk and not cut:  # no newline yet: a line longer than the block, read on
                carry += chunk
                continue
            if not chunk:
                data, carry = carry, b""
            elif carry or cut < len(chunk):
                data, carry = b"".join((carry, memoryview(chunk)[:cut])), chunk[cut:]
            else:
                data = chunk
            if not data:
                return
            offs = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
            offs = np.concatenate([[0], offs, [] if data.endswith(b"\n") else [len(data)]]).astype(np.int64)
            yield data, offs, first_line, base
            first_line += len(offs) - 1
            base += len(data)


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
