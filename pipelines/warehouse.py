"""The DuckDB warehouse: one file, DDL and queries from sql/*.sql, all-or-nothing batch writes.

Every writer replaces a whole batch (delete its keys, insert the new rows) inside one
transaction, so a run killed mid-way leaves either the old batch or the new one, never half.
"""
from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb

REPO_ROOT = Path(__file__).resolve().parents[1]
SQL_DIR = REPO_ROOT / "sql"
SCHEMA_SCRIPTS = ("schema", "views", "ledger")
"""Run in this order on every read-write connect: tables, then the views built on them."""
LOCK_WAIT_S = 60.0
"""How long to wait for another process (a run, the UI) to release the file's write lock."""


@functools.cache
def load_sql(name: str) -> str:
    """Text of sql/<name>.sql, or of one `-- name: <query>` section when called as `<file>.<query>`.

    Names are plain words, so no path can escape sql/.
    """
    file, _, section = name.partition(".")
    if not file.replace("_", "").isalnum() or (section and not section.replace("_", "").isalnum()):
        raise ValueError(f"bad SQL name {name!r}")
    path = SQL_DIR / f"{file}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {path}")
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


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[dict[str, Any]]) -> int:
    """Insert dicts by column name (columns missing from a row are NULL); returns the count."""
    if not rows:
        return 0
    cols = list(rows[0])
    placeholders = ", ".join("?" for _ in cols)
    con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})",  # noqa: S608 (trusted names)
                    [[r.get(c) for c in cols] for r in rows])
    return len(rows)


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
    """A small markdown table for Dagster metadata previews (cells cut to `max_cell` characters)."""
    if not rows:
        return "_no rows_"
    cols = list(rows[0])

    def cell(v: Any) -> str:
        if isinstance(v, float):
            v = f"{v:.4g}"
        s = "" if v is None else str(v)
        s = s.replace("|", "\\|").replace("\n", " ")
        return s if len(s) <= max_cell else s[: max_cell - 1] + "…"

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines)
