"""The DuckDB warehouse: one file, DDL and queries from the `sql` package, all-or-nothing batch writes.

Every writer replaces a whole batch (delete its keys, insert the new rows) inside one
transaction, so a run killed mid-way leaves either the old batch or the new one, never half.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import functools
import importlib.resources
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb

from pipelines.core.markup import md_escape

SCHEMA_SCRIPTS = ("schema", "rewards", "views", "ledger")
"""Run in this order on every read-write connect: tables, the published rewards' macros, then the views."""
LOCK_WAIT_S = 60.0
"""How long to wait for another process (a run, the UI) to release the file's write lock."""


@functools.cache
def load_sql(name: str) -> str:
    """Text of sql/<name>.sql, or of one `-- name: <query>` section when called as `<file>.<query>`.

    Names are plain words, so no path can escape the package.
    """
    file, _, section = name.partition(".")
    if not file.replace("_", "").isalnum() or (section and not section.replace("_", "").isalnum()):
        raise ValueError(f"bad SQL name {name!r}")
    path = importlib.resources.files("sql").joinpath(f"{file}.sql")
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {file}.sql in the sql package")
    text = path.read_text()
    if not section:
        return text
    sections = _sections(text)
    if section not in sections:
        raise KeyError(f"{path} has no query named {section!r} (has: {sorted(sections)})")
    return sections[section]


def _sections(text: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("-- name:"):
            current = out.setdefault(line.split(":", 1)[1].strip(), [])
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v).strip() for k, v in out.items()}


def split_statements(text: str) -> list[str]:
    """Statements of a .sql file split on ';' at line ends (our files keep one statement per ';')."""
    out, cur = [], []
    for line in text.splitlines():
        if line.strip().startswith("--"):
            continue
        cur.append(line)
        if line.rstrip().endswith(";"):
            stmt = "\n".join(cur).strip()
            if stmt.rstrip(";").strip():
                out.append(stmt)
            cur = []
    rest = "\n".join(cur).strip()
    if rest:
        out.append(rest)
    return out


def run_script(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> None:
    """Execute every statement of sql/<name>.sql; named `$params` are bound where a statement uses them."""
    for stmt in split_statements(load_sql(name)):
        con.execute(stmt, _bind(stmt, params))


def _bind(sql: str, params: Sequence[Any] | dict[str, Any] | None) -> Sequence[Any] | dict[str, Any]:
    """Named parameters a statement does not mention are dropped (DuckDB rejects unused ones)."""
    if isinstance(params, dict):
        return {k: v for k, v in params.items() if f"${k}" in sql}
    return params or []


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create missing tables and (re)create views; safe on every connect."""
    for name in SCHEMA_SCRIPTS:
        run_script(con, name)


@contextlib.contextmanager
def connect(path: str | Path, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the warehouse (creating it and its schema unless read-only), waiting out another writer's lock."""
    path = Path(path)
    if read_only and not path.exists():
        raise FileNotFoundError(f"no warehouse at {path}; run `kerneltraj release` first")
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.IOException as e:
            # Another process holds the single-writer lock; it is released when that run ends.
            if "lock" not in str(e).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    try:
        if not read_only:
            ensure_schema(con)
        yield con
    finally:
        con.close()


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT, rolled back on any exception so no half batch survives."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextlib.contextmanager
def bulk_write(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """Storage settings for one large batch (the ingest): text is compressed with zstd while the batch is
    written and checkpointed. Kernel sources (KBs of text each) compress several times smaller and about
    three times faster with zstd than with DuckDB's default dictionary/FSST analysis; what queries return
    does not change. The previous setting comes back afterwards."""
    old = con.execute("SELECT current_setting('force_compression')").fetchall()[0][0]
    con.execute("SET force_compression = 'zstd'")
    try:
        yield con
    finally:
        con.execute("SET force_compression = $old", {"old": old})


PARQUET_ROW_GROUP_ROWS = 16_384
"""Rows per parquet row group of a release shard: DuckDB's default (122,880) buffers about 0.5 GB of kernel
sources per writer before compressing them."""


def copy_parquet(con: duckdb.DuckDBPyConnection, query: str, path: str | Path, wide_rows: bool = False) -> None:
    """COPY `query` to one zstd parquet file with bounded memory.

    `wide_rows`: a sorted query whose rows carry KBs of text each (the `attempts` config). Its ORDER BY
    runs on one thread, which DuckDB spills to disk within its memory limit; on two threads the same COPY
    of 1M attempts ran out of memory at a 1 GB limit (measured: one thread, 24 s and 1.1 GB RSS)."""
    threads = con.execute("SELECT current_setting('threads')").fetchall()[0][0]
    target = "'" + str(path).replace("'", "''") + "'"  # COPY ... TO takes no bound parameters
    if wide_rows:
        con.execute("SET threads = 1")
    try:
        con.execute(f"COPY ({query}) TO {target} (FORMAT parquet, COMPRESSION zstd, "
                    f"ROW_GROUP_SIZE {PARQUET_ROW_GROUP_ROWS})")
    finally:
        if wide_rows:
            con.execute(f"SET threads = {int(threads)}")


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[dict[str, Any]]) -> int:
    """Insert dicts by column name (columns missing from a row are NULL); returns the count.

    Rows whose values all have the plain Python type of their column (str for VARCHAR/JSON, int for
    integers, float or int for DOUBLE, naive datetime for TIMESTAMP, ...) go in as one Arrow table;
    anything else keeps the per-row bind of `executemany`, whose conversions are the reference."""
    if not rows:
        return 0
    cols = list(rows[0])
    values = [[r.get(c) for r in rows] for c in cols]
    arrow = _typed_arrow(con, table, cols, values)
    if arrow is None:
        placeholders = ", ".join("?" for _ in cols)
        con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})",  # noqa: S608
                        [list(row) for row in zip(*values)])
    else:
        insert_arrow(con, table, arrow)
    return len(rows)


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, data: Any) -> None:
    """Insert an Arrow table (or record batch reader) whose column names are columns of `table`."""
    cols = ", ".join(data.schema.names)
    with registered(con, "_kerneltraj_insert_arrow", data) as name:
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}")  # noqa: S608 (trusted names)


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, data: Any) -> Iterator[str]:
    """`data` (Arrow) visible to SQL as `name` for the block. When the block fails, the transaction may be
    aborted and the view cannot be dropped; the original error is what surfaces (the rollback drops it)."""
    con.register(name, data)
    try:
        yield name
    except BaseException:
        with contextlib.suppress(duckdb.Error):
            con.unregister(name)
        raise
    con.unregister(name)


def _plain(types: tuple[type, ...]):
    return lambda v: v is None or type(v) in types


_ARROW_COLUMNS: dict[str, tuple[str, Any]] = {
    # DuckDB column type -> (Arrow type name, which Python values convert exactly as executemany's bind does)
    "VARCHAR": ("string", _plain((str,))),
    "JSON": ("string", _plain((str,))),
    "BIGINT": ("int64", _plain((int,))),
    "INTEGER": ("int32", _plain((int,))),
    "DOUBLE": ("float64", _plain((float, int))),
    "BOOLEAN": ("bool_", _plain((bool,))),
    "TIMESTAMP": ("timestamp", lambda v: v is None or (type(v) is dt.datetime and v.tzinfo is None)),
    "DATE": ("date32", _plain((dt.date,))),
}


def _typed_arrow(con: duckdb.DuckDBPyConnection, table: str, cols: list[str], values: list[list[Any]]):
    """`values` (one list per column) as an Arrow table typed like `table`, or None where any value would
    not convert exactly as a per-row bind (other Python types, other column types, overflow)."""
    import pyarrow as pa

    declared = {name: kind for name, kind, *_ in con.execute(f"DESCRIBE {table}").fetchall()}  # noqa: S608
    arrays = []
    for col, vals in zip(cols, values):
        spec = _ARROW_COLUMNS.get(declared.get(col, ""))
        if spec is None or not all(map(spec[1], vals)):
            return None
        kind = pa.timestamp("us") if spec[0] == "timestamp" else getattr(pa, spec[0])()
        try:
            arrays.append(pa.array(vals, kind))
        except (pa.ArrowException, UnicodeError, OverflowError, ValueError, TypeError):
            return None  # e.g. an int beyond the column's range, a str with lone surrogates
    return pa.table(arrays, names=cols)


def scalar(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | dict | None = None) -> Any:
    row = con.execute(sql, _bind(sql, params)).fetchone()
    return row[0] if row else None


def query_dicts(con: duckdb.DuckDBPyConnection, sql: str,
                params: Sequence[Any] | dict | None = None) -> list[dict[str, Any]]:
    cur = con.execute(sql, _bind(sql, params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def table_counts(con: duckdb.DuckDBPyConnection, tables: Sequence[str]) -> dict[str, int]:
    return {t: int(scalar(con, f"SELECT count(*) FROM {t}")) for t in tables}  # noqa: S608


def markdown_table(rows: Sequence[dict[str, Any]], max_cell: int = 40) -> str:
    """A small markdown table for Dagster metadata previews (cells cut to `max_cell` characters).

    Headers and cells go through md_escape: a name, file name or reason adds no markup, no column."""
    if not rows:
        return "_no rows_"
    cols = list(rows[0])

    def cell(v: Any) -> str:
        return md_escape(f"{v:.4g}" if isinstance(v, float) else v, max_cell)

    lines = ["| " + " | ".join(md_escape(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
