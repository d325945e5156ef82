"""The bulk ingest (DuckDB fast path + parse_line for the rest) against the row-by-row reference.

The reference is what the raw_attempts asset did before the fast path: parse_lines over every file in order
with one shared set of seen ids (and map of held turns), every row bound one at a time (executemany). Both write a real
DuckDB warehouse; raw_attempts, quarantine and input_files must be equal row for row (EXCEPT ALL both ways, so
duplicates count), on the demo corpus plus demo/malformed.jsonl and on a generated file of hostile and
unusual lines (trailing commas, NaN spellings, repeated and unknown keys, escaped commas, lone surrogates,
invalid UTF-8, deep nesting, odd timestamps, ids repeated within and across files, a file listed twice).
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from pathlib import Path

import duckdb
import pytest

from pipelines.core import attempt_files as ingest
from grader.catalogue import load_catalogue
from grader.contract import MAX_SOURCE_BYTES
from pipelines.core.rawattempt import MAX_LINE_BYTES, RawAttempt, parse_lines
from pipelines.core.warehouse import connect, insert_rows, run_script, transaction
from tests.conftest import REPO_ROOT

DEMO = REPO_ROOT / "demo"
NOW = dt.datetime(2026, 3, 30, 12, 0, 0)
RUN = "test-run"
COMPARED = {
    "raw_attempts": "attempt_id, task_id, agent, model, trajectory_id, turn, language, entry_point, source, "
                    "source_sha256, source_format, generation_tokens, generation_budget_tokens, started_at, "
                    "finished_at, claimed_speedup, origin, input_sha256, CAST(extra AS VARCHAR), run_id, ingested_at",
    "quarantine": "origin, attempt_id, reason_code, reason, raw_excerpt, import_origin, input_sha256, run_id, "
                  "ingested_at, duplicate_of",
    "input_files": "path, sha256, size_bytes, accepted, quarantined, nonblank_lines, run_id, ingested_at",
}


def _known() -> set[str]:
    return set(load_catalogue())


def _executemany(con, table: str, rows: list[dict]) -> None:
    if rows:
        cols = list(rows[0])
        con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
                        [[r.get(c) for c in cols] for r in rows])


def reference_ingest(db: Path, paths: list[Path]) -> None:
    """The row-by-row ingest: parse_lines with one shared seen set, turn and content maps, rows bound one by one."""
    known, seen, turns, contents, attempts, bad, files = _known(), set(), {}, {}, [], [], []
    for path in paths:
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        n_ok = n_bad = 0
        for item in parse_lines(data.split(b"\n"), ingest.display_path(path), known, seen, turns, contents):
            if isinstance(item, RawAttempt):
                attempts.append(ingest.attempt_row(item, sha, RUN, NOW))
                n_ok += 1
            else:
                bad.append(ingest.quarantine_row(item, sha, RUN, NOW))
                n_bad += 1
        files.append({"path": ingest.display_path(path), "sha256": sha, "size_bytes": len(data), "accepted": n_ok,
                      "quarantined": n_bad, "nonblank_lines": sum(1 for ln in data.split(b"\n") if ln.strip()),
                      "run_id": RUN, "ingested_at": NOW})
    with connect(db) as con, transaction(con):
        run_script(con, "ingest.clear")
        for table, rows in (("raw_attempts", attempts), ("quarantine", bad), ("input_files", files)):
            _executemany(con, table, rows)


def bulk_ingest(db: Path, paths: list[Path], block_bytes: int | None = None) -> dict:
    """The data path's ingest: load_attempt_files, then input_files through insert_rows."""
    old = ingest.BLOCK_BYTES
    ingest.BLOCK_BYTES = block_bytes or old
    try:
        with connect(db) as con, transaction(con):
            run_script(con, "ingest.clear")
            files = ingest.load_attempt_files(con, paths, _known(), RUN, NOW)
            insert_rows(con, "input_files", files)
    finally:
        ingest.BLOCK_BYTES = old
    return {"files": files}


def differences(a: Path, b: Path) -> dict[str, int]:
    out = {}
    with duckdb.connect(str(a), read_only=True) as con:
        con.execute(f"ATTACH '{b}' AS other (READ_ONLY)")
        for table, cols in COMPARED.items():
            one = f"SELECT {cols} FROM {table} EXCEPT ALL SELECT {cols} FROM other.{table}"
            two = f"SELECT {cols} FROM other.{table} EXCEPT ALL SELECT {cols} FROM {table}"
            out[table] = con.execute(f"SELECT (SELECT count(*) FROM ({one})) + (SELECT count(*) FROM ({two}))"
                                     ).fetchone()[0]
        out["rows"] = con.execute("SELECT count(*) FROM raw_attempts").fetchone()[0]
        out["quarantined"] = con.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    return out


def _compare(tmp_path: Path, paths: list[Path], **kw) -> dict[str, int]:
    reference_ingest(tmp_path / "ref.duckdb", paths)
    bulk_ingest(tmp_path / "bulk.duckdb", paths, **kw)
    return differences(tmp_path / "ref.duckdb", tmp_path / "bulk.duckdb")


# ---- generated hostile and unusual lines --------------------------------------------------------------
def _base(i: int, rng: random.Random) -> dict:
    return {"attempt_id": f"gen.a{i}", "task_id": rng.choice(["softmax_rows_fp32", "gelu_fp32", "matmul_fp16"]),
            "agent": "kestrel", "model": "talon-coder-70b", "trajectory_id": f"gen.t{i // 3}", "turn": 1 + i % 3,
            "language": rng.choice(["triton", "pytorch"]), "entry_point": "run",
            "source": "import torch\n\ndef run(x):\n    return torch.relu(x)  # a, b, [1, 2,]\n",
            "generation_tokens": rng.randrange(100, 9000), "generation_budget_tokens": 8192,
            "started_at": "2026-03-01T09:01:00Z", "finished_at": "2026-03-01T09:01:30Z",
            "extra": {"harness": "tb-1.4", "temperature": rng.choice([0.2, 0.7])}}


def _dump(obj: dict, rng: random.Random) -> str:
    return json.dumps(obj, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(", ", ": "), (",", ":")]))


# Each mutation takes (record, rng) and returns the line text (without newline) or bytes.
MUTATIONS = {
    "plain": lambda r, g: _dump(r, g),
    "no_optional": lambda r, g: _dump({k: r[k] for k in ("attempt_id", "task_id", "agent", "model", "trajectory_id",
                                                          "turn", "language", "source")}, g),
    "nulls": lambda r, g: _dump({**r, "entry_point": None} if g.random() < 0.3 else
                                {**r, "extra": None, "started_at": None, "generation_tokens": None,
                                 "source_format": None, "claimed_speedup": None}, g),
    "unicode": lambda r, g: _dump({**r, "source": r["source"] + "# é☃😀 \u202e\n", "agent": "késtrel" * 30,
                                   "extra": {"note": "ü, ñ"}}, g),
    "escapes": lambda r, g: _dump(r, g).replace('"run"', '"r\\u0075n"').replace("\\n", "\\u000a", 2),
    "crlf": lambda r, g: _dump(r, g) + "\r",
    "spaces": lambda r, g: "  \t" + _dump(r, g) + " \t",
    "trailing_comma_top": lambda r, g: _dump(r, g)[:-1] + ",}",
    "trailing_comma_extra": lambda r, g: _dump(r, g).replace("0.7}", "0.7,}").replace("0.2}", "0.2 ,}"),
    "trailing_comma_list": lambda r, g: _dump({**r, "extra": {"l": [1, 2]}}, g).replace("2]", "2,]"),
    "comma_escaped": lambda r, g: _dump(r, g).replace("a, b", "a\\u002c b"),
    # an escaped comma balancing a trailing one: only the escape guard tells this line from a strict one
    "comma_escaped_trailing": lambda r, g: _dump(r, g).replace("a, b", g.choice(["a\\u002c b", "a\\u002C b"]))[:-1]
                                           + ",}",
    "nan_top": lambda r, g: _dump({**r, "claimed_speedup": g.choice([float("nan"), float("inf")])}, g),
    "nan_spelling_top": lambda r, g: _dump(r, g)[:-1] + ', "claimed_speedup": '
                                     + g.choice(["nan", "inf", "-inf", "Infinity"]) + "}",
    "nan_extra": lambda r, g: _dump({**r, "extra": {"x": float("nan"), "y": float("-inf")}}, g),
    "nan_spelling_extra": lambda r, g: _dump(r, g).replace("0.2", g.choice(["nan", "inf", "NaN", "-Infinity"]))
                                                  .replace("0.7", g.choice(["nan", "inf", "NaN", "-Infinity"])),
    "big_int_extra": lambda r, g: _dump({**r, "extra": {"n": 12345678901234567890123456789, "t": 0.7, "u": 0.2}}, g)
                                  .replace("0.7", "1" * g.choice([20, 5000])).replace("0.2", g.choice(["1e400", "-0"])),
    "dup_key_top": lambda r, g: _dump(r, g)[:-1] + g.choice([', "turn": 2}', ', "turn": "x"}',
                                                             ', "attempt_id": "gen.zz"}']),
    "dup_key_extra": lambda r, g: _dump(r, g).replace('"harness": "tb-1.4"', '"harness": "a", "harness": "b"')
                                             .replace('"harness":"tb-1.4"', '"harness":"a","harness":"b"'),
    "unknown_key": lambda r, g: _dump({**r, g.choice(["reasoning", "prompt", "source_sha256", "extra2"]): "x, y"}, g),
    "origin_key": lambda r, g: _dump({**r, "origin": "elsewhere.jsonl:1"}, g),
    "deep_extra": lambda r, g: _dump(r, g).replace('"harness": "tb-1.4"',
                                                   '"d": ' + "[" * (d := g.choice([63, 70, 1200])) + "]" * d)
                                          .replace('"harness":"tb-1.4"', '"d":' + "[" * d + "]" * d),
    "surrogate": lambda r, g: _dump(r, g).replace('"kestrel"', g.choice(['"kes\\ud800trel"', '"\\udfff"']))
                                         .replace('import torch', 'import \\ud83d\\ude00 torch'),
    "nul": lambda r, g: _dump({**r, g.choice(["source", "agent", "source_format", "attempt_id"]): "a\x00b"}, g),
    "bad_utf8": lambda r, g: _dump(r, g).encode().replace(b"relu", g.choice([b"re\xff", b"\xed\xa0\x80", b"\xc0\xaf"])),
    "bom": lambda r, g: "\ufeff" + _dump(r, g),
    "blank": lambda r, g: g.choice(["", "   ", "\t", "\x0b\x0c", "\r"]),
    "not_object": lambda r, g: g.choice(["[1, 2]", '"text"', "42", "null", "{}", "{", "}"]),
    "truncated": lambda r, g: _dump(r, g)[: g.randrange(1, 60)],
    "oversized_source": lambda r, g: _dump({**r, "source": "x" * (MAX_SOURCE_BYTES + g.choice([0, 1]))}, g),
    "oversized_row": lambda r, g: _dump({**r, "extra": {"pad": "y" * MAX_LINE_BYTES}}, g),
    "unknown_task": lambda r, g: _dump({**r, "task_id": "no_such_task"}, g),
    "bad_language": lambda r, g: _dump({**r, "language": g.choice(["rust", "Triton", ""])}, g),
    "bad_ids": lambda r, g: _dump({**r, g.choice(["attempt_id", "trajectory_id"]):
                                   g.choice(["a..b", "../x", "x" * 201, "-lead", "ok id", 7, None])}, g),
    "entry_point": lambda r, g: _dump({**r, "entry_point": g.choice(["1abc", "ñame", "class", "run_2", "", "a-b",
                                                                      5])}, g),
    "names": lambda r, g: _dump({**r, g.choice(["agent", "model"]): g.choice(["x" * 200, "x" * 201, "é" * 200, "",
                                                                              3])}, g),
    "turn": lambda r, g: _dump(r, g).replace(f'"turn": {r["turn"]}', '"turn": ' + g.choice(
        ["0", "10000", "10001", '"1"', "1.0", "true", "1e0", "-0", "-1", "99999999999999999999999"])),
    "tokens": lambda r, g: _dump(r, g).replace('"generation_budget_tokens": 8192',
                                               '"generation_budget_tokens": ' + g.choice(
        ["0", "4611686018427387903", "4611686018427387904", "-1", "1.5", "false", '"8"', "null"])),
    "timestamps": lambda r, g: _dump({**r, g.choice(["started_at", "finished_at"]): g.choice([
        "2026-03-01T09:01:00", "2026-03-01T09:01:00.5Z", "2026-03-01T09:01:00.1234567Z", "2026-02-29T10:00:00Z",
        "2024-02-29T10:00:00Z", "2026-03-01T24:00:00Z", "2026-03-01T23:59:60Z", "0000-01-01T00:00:00Z",
        "2026-03-01T09:01:00+23:59", "2026-03-01T09:01:00+24:00", "2026-03-01T09:01:00-05:30", "2026-03-01 09:01:00",
        "2026-03-01", "20260301T090100Z", "yesterday", 1700000000, "2026-13-01T00:00:00Z",
        "2026-03-01T09:01:00ZZ"])}, g),
    "claims": lambda r, g: _dump({**r, "claimed_speedup": g.choice([1.5, 2, 0, -1, 1e299, 1e300, 5e-324, True, "2x",
                                                                    123456789012345678901234567890, 2**64 + 1])}, g),
    "source_format": lambda r, g: _dump({**r, "source_format": g.choice(["cuda-l1", "", 7, ["a"], {"k": 1}, True])}, g),
    # an imported corpus's row (as `kerneltraj import` writes it): repeats of one task and source are one attempt
    "imported": lambda r, g: _dump({**r, "source_format": g.choice(["cuda-l1", "kernelbench"]),
                                    "extra": {"import_origin": f"h100.jsonl:{g.randrange(1, 9)}"}}, g),
    "source_types": lambda r, g: _dump({**r, "source": g.choice([7, None, ["x"], {"a": 1}, ""])}, g),
    "extra_types": lambda r, g: _dump({**r, "extra": g.choice([[1], "x", 3, {}, {"a": {"b": [1, {"c": None}]}}])}, g),
}


def hostile_lines(n: int, seed: int, prefix: str) -> list[bytes]:
    rng = random.Random(seed)
    kinds = list(MUTATIONS)
    out = []
    for i in range(n):
        rec = _base(i % (n // 2), rng)  # ids repeat: the second half re-uses the first half's ids
        rec["attempt_id"] = f"{prefix}{rec['attempt_id']}" if rng.random() < 0.9 else rec["attempt_id"]
        kind = "plain" if rng.random() < 0.3 else rng.choice(kinds)
        line = MUTATIONS[kind](rec, rng)
        out.append(line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass"))
    return out


# ---- the tests ---------------------------------------------------------------------------------------
def test_demo_corpus_and_malformed_rows_are_identical(tmp_path: Path) -> None:
    paths = [DEMO / "attempts.jsonl", DEMO / "malformed.jsonl"]
    d = _compare(tmp_path, paths)
    assert d["rows"] > 100 and d["quarantined"] >= 14, d  # the corpus really went through
    assert {k: d[k] for k in COMPARED} == {k: 0 for k in COMPARED}, d


@pytest.mark.slow
def test_hostile_lines_are_identical_across_files_and_blocks(tmp_path: Path) -> None:
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_bytes(b"\n".join(hostile_lines(1400, 1, "x.")) + b"\n")
    two.write_bytes(b"\n".join(hostile_lines(700, 2, "x.")))  # no final newline; ids shared with `one`
    # Small blocks: lines cross block edges, and a long line is longer than a block.
    d = _compare(tmp_path, [one, two, one, DEMO / "malformed.jsonl"], block_bytes=64 << 10)
    assert d["rows"] > 300 and d["quarantined"] > 1000, d
    assert {k: d[k] for k in COMPARED} == {k: 0 for k in COMPARED}, d


def test_fast_path_takes_the_ordinary_rows() -> None:
    """Well-formed rows are admitted by DuckDB, not by the per-line parser (else the speed claim is empty)."""
    import pyarrow as pa

    from pipelines.core.rawattempt import admissible_rows
    from pipelines.core.warehouse import load_sql

    rng = random.Random(4)
    lines = [MUTATIONS[k](_base(i, rng), rng) + "\n" for i in range(300)
             for k in ("plain", "no_optional", "unicode", "escapes", "crlf")]
    block = pa.table({"line_no": list(range(1, len(lines) + 1)), "line": lines})
    with duckdb.connect() as con:
        fast = admissible_rows(con, block, _known(), load_sql)
    assert fast.num_rows == len(lines) - 300  # all but `unicode`, whose long multi-byte agent takes parse_line
    assert fast.column("source_sha256").to_pylist()[:2] == [
        hashlib.sha256(s.encode()).hexdigest() for s in fast.column("source").to_pylist()[:2]]


@pytest.mark.parametrize("kind", sorted(MUTATIONS))
def test_each_kind_alone(tmp_path: Path, kind: str) -> None:
    """Per mutation kind, so a difference names its cause."""
    rng = random.Random(kind)
    lines = []
    for i in range(30):
        line = MUTATIONS[kind](_base(i, rng), rng)
        lines.append(line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass"))
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    d = _compare(tmp_path, [path])
    assert {k: d[k] for k in COMPARED} == {k: 0 for k in COMPARED}, d


def test_insert_rows_arrow_and_executemany_agree(tmp_path: Path) -> None:
    """insert_rows' Arrow path stores what a per-row bind stores; odd values fall back to that bind."""
    rows = [{"origin": "f:1", "attempt_id": None, "reason_code": "bad_json", "reason": "r, é", "raw_excerpt": "a\x00b",
             "import_origin": None, "input_sha256": "0" * 64, "run_id": RUN, "ingested_at": NOW},
            {"origin": "f:2", "attempt_id": "x", "reason_code": "bad_type", "reason": "", "raw_excerpt": "",
             "import_origin": "o", "input_sha256": None, "run_id": RUN, "ingested_at": NOW.replace(microsecond=7)}]
    odd = [{"path": "p", "sha256": "s", "size_bytes": 2**40, "accepted": True, "quarantined": 1.0,
            "nonblank_lines": 3, "run_id": 5, "ingested_at": NOW}]
    with duckdb.connect() as a, duckdb.connect() as b:
        for con in (a, b):
            run_script(con, "schema")
        insert_rows(a, "quarantine", rows)
        insert_rows(a, "input_files", odd)
        _executemany(b, "quarantine", rows)
        _executemany(b, "input_files", odd)
        for table in ("quarantine", "input_files"):
            q = f"SELECT * FROM {table} ORDER BY ALL"
            assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_sql_id_pattern_is_the_parsers() -> None:
    """The fast path's id regex is a literal in sql/ingest.sql (a bound one is compiled per row); it must be
    pipelines.core.rawattempt._ID."""
    from pipelines.core.rawattempt import _ID
    from pipelines.core.warehouse import load_sql

    sql = load_sql("ingest.admissible")
    assert sql.count(f"'{_ID.pattern.removeprefix('^').removesuffix('$')}'") == 3


def test_copy_parquet_bounds_row_groups_and_restores_threads(tmp_path: Path) -> None:
    from pipelines.core.warehouse import PARQUET_ROW_GROUP_ROWS, copy_parquet

    out = tmp_path / "wide.parquet"
    with duckdb.connect() as con:
        con.execute("SET threads = 2")
        copy_parquet(con, "SELECT range AS i, repeat('x', 100) AS s FROM range(40000) ORDER BY i DESC", out,
                     wide_rows=True)
        assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 2
        groups = con.execute("SELECT DISTINCT row_group_id, row_group_num_rows FROM parquet_metadata($p)",
                             {"p": str(out)}).fetchall()
        first = con.execute("SELECT i FROM read_parquet($p) LIMIT 1", {"p": str(out)}).fetchone()[0]
    assert len(groups) == 3 and max(n for _, n in groups) == PARQUET_ROW_GROUP_ROWS and first == 39999
