"""Data-path benchmark: synthetic raw attempts through ingest, grades, ledger, trajectories, splits, release.

    python bench/data_path.py --n 1000000          # the full run (about 4 GB of JSONL under --workdir)
    python bench/data_path.py --n 20000            # smoke run, under a minute
    ... --compare-rowwise                          # also the row-by-row reference ingest, checked row for row

No grading happens: each attempt comes with a synthetic grade (primary and recheck) shaped like the rows
the grading stage writes. Everything else is the pipeline's own code and SQL: the ingest is
`pipelines.core.attempt_files.load_attempt_files` (what the raw_attempts asset runs: DuckDB admits the lines it can
prove admissible, `parse_line` judges the rest), the warehouse is created by sql/schema.sql, views.sql and
ledger.sql, the stages run `revalidation.rebuild`, `accounting.rebuild`, `trajectories.rebuild`,
`pipelines.curation.split_policy.build_manifest`, and the release is
`pipelines.publishing.release_files.export_configs`. Grades enter in bulk
from parquet (the grading asset commits them as they arrive); that statement is bench-only and inline below,
marked `BENCH-ONLY SQL`, as is the row-for-row comparison against the reference ingest.

Every stage runs in its own spawned process; its peak memory is that process's RSS high-water mark
(ru_maxrss), plus those of the workers it ran at the same time. The physical floor is DuckDB reading
the released parquet and writing it again, nothing else (same files, same compression and row groups).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import os
import random
import resource
import shutil
import string
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipelines.core.rawattempt import RawAttempt, parse_lines  # noqa: E402

GEN_VERSION = 1
"""Bump when the generator changes: cached inputs under --workdir are rebuilt."""
ATTEMPTS_PER_FILE = 125_000
RUN_ID = "bench-data-path"
AGENTS = [("kestrel", "talon-coder-70b"), ("osprey", "demo-coder-7b"), ("merlin", "kernel-r1-32b"),
          ("harrier", "gpt-kernels-mini"), ("falcon", "talon-coder-70b"), ("kite", "qwen-kern-14b")]
STATUSES = [("correct", "ok", 0.35), ("wrong_output", "mismatch", 0.28), ("compile_error", "compile", 0.1),
            ("runtime_error", "exception", 0.08), ("cheat_flagged", "forbidden_op", 0.07),
            ("timeout", "timeout", 0.04), ("crashed", "crash", 0.04), ("unsupported_on_backend", "unsupported", 0.02),
            ("infra_error", "infra", 0.02)]
BAD_KINDS = ("bad_json", "missing_field", "bad_language", "unknown_task", "duplicate_id", "bad_type")

# ---- synthetic sources: a few kernel templates, varied, padded to 1-8 KB ----------------------------
TEMPLATES = [string.Template(t) for t in (
    '''import torch
import triton
import triton.language as tl


@triton.jit
def ${name}(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(y_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


def run(x):
    y = torch.empty_like(x)
    ${name}[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]),
                          num_warps=${warps})
    return y
''',
    '''import torch
import triton
import triton.language as tl


@triton.jit
def ${name}(x_ptr, w_ptr, b_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + row * n + offs, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    d = tl.where(m, x - mean, 0.0)
    var = tl.sum(d * d, axis=0) / n
    w = tl.load(w_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(y_ptr + row * n + offs, d * tl.rsqrt(var + eps) * w + b, mask=m)


def run(x, w, b):
    y = torch.empty_like(x)
    ${name}[(x.shape[0],)](x, w, b, y, x.shape[1], ${eps}, BLOCK=${block})
    return y
''',
    '''import torch
import triton
import triton.language as tl


@triton.jit
def ${name}(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K))
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N))
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def run(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    grid = (triton.cdiv(M, ${block}), triton.cdiv(N, ${block}))
    ${name}[grid](a, b, c, M, N, K, BM=${block}, BN=${block}, BK=32, num_warps=${warps})
    return c
''',
    '''import torch


def run(x):
    # ${name}: fused in eager PyTorch, chunked to stay in cache
    out = torch.empty_like(x)
    for start in range(0, x.shape[0], ${block}):
        chunk = x[start:start + ${block}]
        out[start:start + ${block}] = 0.5 * chunk * (1.0 + torch.erf(chunk * 0.7071067811865476))
    return out
''')]
SENTENCES = ["This kernel keeps one row per program so the reduction never leaves registers.",
             "Masked loads pad the tail with the identity of the reduction.", "Accumulate in fp32 for stability.",
             "Tried a two-pass variant first; it was slower on wide rows.", "The grid is one program per row.",
             "BLOCK must cover the row; larger rows would need a loop over column tiles.",
             "Previous turn failed on the hidden sizes, so the mask now uses n_cols, not BLOCK."]


def make_variant(rng: random.Random) -> str:
    """One source: a template with renamed kernel and constants, padded with notes, configs and a harness."""
    t = rng.choice(TEMPLATES)
    src = t.substitute(name=f"_{rng.choice(['k', 'kernel', 'fused', 'fwd'])}_{rng.randrange(10**6)}",
                       warps=rng.choice([2, 4, 8]), eps=rng.choice(["1e-5", "1e-6"]),
                       block=rng.choice([32, 64, 128, 256, 1024]))
    target = int(1024 * 2 ** rng.uniform(0, 3))  # log-uniform 1-8 KB
    while len(src) < target:
        pick = rng.random()
        if pick < 0.4:
            src += "\n# " + "\n# ".join(rng.choice(SENTENCES) for _ in range(rng.randint(2, 6))) + "\n"
        elif pick < 0.7:
            cfgs = ", ".join(f"triton.Config({{'BLOCK': {rng.choice([64, 128, 256, 512])}}}, "
                             f"num_warps={rng.choice([2, 4, 8])}, num_stages={rng.randint(1, 4)})"
                             for _ in range(rng.randint(2, 8)))
            src += f"\nCONFIGS_{rng.randrange(999)} = [{cfgs}]\n"
        else:
            sizes = ", ".join(f"({rng.randint(1, 64) * 64}, {rng.randint(1, 64) * 32})"
                              for _ in range(rng.randint(2, 6)))
            src += (f"\n\ndef _bench_{rng.randrange(999)}(fn):\n    import time\n    for shape in [{sizes}]:\n"
                    f"        x = torch.randn(shape, device='cuda')\n        t0 = time.perf_counter()\n"
                    f"        for _ in range({rng.randint(5, 50)}):\n            fn(x)\n"
                    f"        torch.cuda.synchronize()\n        print(shape, time.perf_counter() - t0)\n")
    return src


# ---- input generation (one process per file; cached under --workdir) --------------------------------
LINE = ('{"attempt_id": "%s", "task_id": "%s", "agent": "%s", "model": "%s", "trajectory_id": "%s", "turn": %s, '
        '"language": "%s", "entry_point": "run", "generation_tokens": %d, "generation_budget_tokens": %d, '
        '"started_at": "2026-03-%02dT%02d:%02d:%02dZ", "finished_at": "2026-03-%02dT%02d:%02d:%02dZ", '
        '"extra": {"harness": "tb-1.%d", "temperature": %.1f}%s}\n')
SIZES = ('[{"size_key": "M=64,N=128", "hidden": false, "cand_ms": %.5f, "expert_ms": %.5f, "cand_ms_ci": null, '
         '"expert_ms_ci": null, "reps": 3, "speedup": %r, "max_rel_err": %.4f}, {"size_key": "M=100,N=77", '
         '"hidden": false, "cand_ms": %.5f, "expert_ms": %.5f, "cand_ms_ci": null, "expert_ms_ci": null, "reps": 3, '
         '"speedup": %r, "max_rel_err": %.4f}, {"size_key": "hidden#1", "hidden": true, "cand_ms": %.5f, '
         '"expert_ms": %.5f, "cand_ms_ci": null, "expert_ms_ci": null, "reps": 3, "speedup": %r, "max_rel_err": %.4f}]')
PHASES = ('{"startup": %.4f, "compile": %.4f, "correctness": %.4f, "timing": %.4f, "expert": %.4f, "total": %.4f}')


def first_id(k: int) -> str:
    return f"syn.f{k:04d}.tr0000000.t1"


def gen_file(args: tuple) -> dict:
    """Write attempts-<k>.jsonl and grades-<k>.parquet; return the counts the ingest must reproduce."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    k, n, bad_rate, seed, out, tasks = args
    rng, g = random.Random(seed * 7919 + k), np.random.default_rng(seed * 7919 + k)
    variants = [make_variant(rng) for _ in range(1024)]
    escaped = [json.dumps(v)[:-1] for v in variants]
    langs = ["pytorch" if "import triton" not in v[:80] else "triton" for v in variants]
    task_ids = sorted(tasks)
    v_idx, t_idx, a_idx = g.integers(1024, size=n), g.integers(len(task_ids), size=n), g.integers(len(AGENTS), size=n)
    toks, budget = g.integers(200, 6000, size=n), g.choice([4096, 8192, 16384], size=n)
    secs, harness, temp = g.integers(0, 80000, size=n), g.integers(4, 6, size=n), g.choice([0.2, 0.7, 1.0], size=n)
    bad_draw, kinds = g.random(n) < bad_rate, g.integers(len(BAD_KINDS), size=n)
    bad_draw[0] = False  # the first line of a file is always valid: the next file repeats its id on purpose
    lines, accepted, bad = [], [], {b: 0 for b in BAD_KINDS}
    path = Path(out) / f"attempts-{k:05d}.jsonl"
    f = path.open("w")
    i, traj = 0, 0
    while i < n:
        tid, first = f"syn.f{k:04d}.tr{traj:07d}", i
        traj += 1
        for turn in range(1, int(g.integers(1, 6)) + 1):
            if i >= n:
                break
            v, task, (agent, model) = int(v_idx[i]), task_ids[t_idx[first]], AGENTS[a_idx[first]]
            aid = f"{tid}.t{turn}"
            trailer = f"# attempt {aid}\n"
            kind = BAD_KINDS[kinds[i]] if bad_draw[i] else None
            rid = aid
            if kind == "duplicate_id":  # half repeat an id of the previous file, parsed by the other worker
                rid = first_id(k - 1) if k > 0 and kinds[i - 1] % 2 else accepted[-1][0]
            day, s0 = 1 + traj % 28, int(secs[i])
            s1 = s0 + 7
            line = LINE % (rid, task if kind != "unknown_task" else "no_such_task", agent, model, tid,
                           turn if kind != "bad_type" else f'"{turn}"', langs[v] if kind != "bad_language" else "rust",
                           toks[i], budget[i], day, s0 // 3600, s0 // 60 % 60, s0 % 60, day, s1 // 3600 % 24,
                           s1 // 60 % 60, s1 % 60, harness[i], temp[i],
                           "" if kind == "missing_field" else
                           ', "source": ' + escaped[v] + trailer.replace("\n", "\\n") + '"')
            if kind == "bad_json":
                line = line[: len(line) // 2] + "\n"
            if kind is None:
                accepted.append((aid, task, hashlib.sha256((variants[v] + trailer).encode()).hexdigest()))
            else:
                bad[kind] += 1
            lines.append(line)
            i += 1
            if len(lines) == 10_000:
                f.write("".join(lines))
                lines.clear()
    f.write("".join(lines))
    f.close()
    pq.write_table(pa.table(grade_columns(accepted, tasks, g)), Path(out) / f"grades-{k:05d}.parquet",
                   compression="zstd")
    return {"file": path.name, "lines": i, "accepted": len(accepted), "bad": bad}


def grade_columns(accepted: list[tuple[str, str, str]], tasks: dict, g) -> dict:
    """graded_attempts rows for every accepted attempt: a primary grade and, unless infra, a recheck."""
    import datetime as dt

    import numpy as np

    names, codes, weights = zip(*STATUSES)
    p = np.array(weights) / sum(weights)
    m = len(accepted)
    primary = g.choice(len(names), size=m, p=p)
    flip = np.where(g.random(m) < 0.97, primary, g.choice(len(names), size=m, p=p))
    has_recheck = ~np.isin(primary, [names.index("infra_error"), names.index("unsupported_on_backend")])
    rows = [(a, "primary", int(s)) for a, s in zip(accepted, primary)]
    rows += [(a, "revalidation", int(s)) for a, s, h in zip(accepted, flip, has_recheck) if h]
    r = len(rows)
    speed = np.clip(np.exp(g.normal(-1.0, 1.2, size=(r, 3))), 1 / 64, 8.0)
    ms, err, ph = g.uniform(0.01, 3, size=(r, 6)), g.random((r, 3)), g.uniform(0.001, 2.0, size=(r, 6))
    seeds, mus = g.integers(0, 2**62, size=r), g.uniform(0.1, 4, size=r)
    cols: dict[str, list] = {c: [] for c in GRADE_COLUMNS}
    now = dt.datetime(2026, 3, 30, 12, 0, 0)
    for j, ((aid, task, sha), grading_pass, s) in enumerate(rows):
        status, correct = names[s], names[s] == "correct"
        sp = [float(x) for x in speed[j]]
        rew = sum(math.log2(x) for x in sp) / 3 if correct else -24.0
        sizes = SIZES % (ms[j, 0], ms[j, 1], sp[0], err[j, 0], ms[j, 2], ms[j, 3], sp[1], err[j, 1], ms[j, 4],
                         ms[j, 5], sp[2], err[j, 2]) if correct else "[]"
        phases = PHASES % tuple(ph[j])
        vals = (aid, grading_pass, task, tasks[task], "0.3.0", sha, "fp-bench", status, codes[s],
                f"{status}: synthetic grade of {aid}", rew, 2 ** rew if correct else None, float(mus[j]), sizes,
                '{"atol": 1e-05, "dtype": "float32", "rtol": 0.0001}', phases, *map(float, ph[j]), 0.0, 1,
                int(seeds[j]), "gpu", "NVIDIA H200", "isolated", '{"mount_ns": true, "net_ns": true, "uid": 61000}',
                '["candidate:_k", "triton_poi_fused_0"]' if j % 3 else "[]", "bench-grading", now)
        for c, v in zip(GRADE_COLUMNS, vals):
            cols[c].append(v)
    return cols


GRADE_COLUMNS = ("attempt_id grading_pass task_id task_revision grader_version source_sha256 fingerprint_id status "
                 "reason_code reason reward speedup_geomean measured_speedup_geomean sizes tolerances phase_seconds "
                 "startup_s compile_s correctness_s timing_s expert_s total_s retry_s tries seed profile device "
                 "sharing sandbox kernels_launched run_id graded_at").split()


# ---- stage 1: ingest ----------------------------------------------------------------------------------
# `ingest` is the product's own: pipelines.core.attempt_files.load_attempt_files, the function the raw_attempts asset
# calls (DuckDB admits the lines it can prove admissible, parse_line judges the rest, duplicates settled in SQL).
# `ingest_rowwise` (with --compare-rowwise) is the reference it replaced, made as fast as Python allows:
# parse_lines on every line in parse workers (one per core), rows as parquet parts, one bulk insert. The
# check stage compares the two warehouses row for row.
RAW_COLUMNS = ("attempt_id task_id agent model trajectory_id turn language entry_point source source_sha256 "
               "source_format generation_tokens generation_budget_tokens started_at finished_at claimed_speedup "
               "origin extra").split()
_INT_COLUMNS = {"turn", "generation_tokens", "generation_budget_tokens", "line_no", "file_no", "byte_offset"}


class _Parts:
    """Accepted rows of one worker, flushed to parquet parts every `batch_rows` rows."""

    def __init__(self, out: str, tag: int, batch_rows: int):
        self.out, self.tag, self.batch_rows, self.paths = Path(out), tag, batch_rows, []
        self.cols: dict[str, list] = {c: [] for c in (*RAW_COLUMNS, "file_no", "line_no", "byte_offset")}

    def add(self, rec, source: str, sha: str, extra: str, file_no: int, line_no: int, offset: int) -> None:
        c = self.cols
        for name in ("attempt_id", "task_id", "agent", "model", "trajectory_id", "turn", "language", "entry_point",
                     "source_format", "generation_tokens", "generation_budget_tokens", "started_at", "finished_at",
                     "claimed_speedup", "origin"):
            c[name].append(getattr(rec, name))
        for name, v in (("source", source), ("source_sha256", sha), ("extra", extra), ("file_no", file_no),
                        ("line_no", line_no), ("byte_offset", offset)):
            c[name].append(v)
        if len(c["attempt_id"]) >= self.batch_rows:
            self.flush()

    def flush(self) -> None:
        import pyarrow.parquet as pq

        if self.cols["attempt_id"]:
            path = self.out / f"part-{self.tag:05d}-{len(self.paths):05d}.parquet"
            pq.write_table(_arrow(self.cols), path, compression="lz4")
            self.paths.append(str(path))
            for v in self.cols.values():
                v.clear()


def _arrow(cols: dict[str, list]):
    """An Arrow table with the warehouse's column types. Values are converted the way DuckDB's executemany
    (insert_rows) would: parse_record admits e.g. an integer `started_at`, which a VARCHAR column stores as text."""
    import pyarrow as pa

    def typed(name: str, values: list):
        if name in _INT_COLUMNS:
            return pa.array(values, pa.int64())
        if name == "claimed_speedup":
            return pa.array(values, pa.float64())
        return pa.array([v if v is None or type(v) is str else str(v) for v in values], pa.string())
    return pa.table({k: typed(k, v) for k, v in cols.items()})


def _extra_text(extra: dict) -> str:
    return json.dumps(extra, sort_keys=True, default=str)  # as attempt_row() in pipelines/core/attempt_files.py


def parse_file_group(args: tuple) -> dict:
    """A parse worker over whole files (row-by-row reference); returns its parts, quarantined rows, file facts."""
    files, known, out, batch_rows, block_mb = args
    parts, quarantined, facts = _Parts(out, files[0][0], batch_rows), [], []
    for file_no, path, display in files:
        digest, n_lines, n_blank = hashlib.sha256(), 0, 0
        lines: dict[int, tuple[bytes, int]] = {}  # line_no -> (raw line, byte offset)
        for data, offs, first_line, base in _blocks(path, block_mb << 20, digest):
            for i in range(len(offs) - 1):
                raw = data[offs[i]:offs[i + 1]]
                raw = raw[:-1] if raw.endswith(b"\n") else raw
                lines[first_line + i] = (raw, base + int(offs[i]))
                n_blank += not raw.strip()
            n_lines = first_line + len(offs) - 2
            # parse_lines over the lines read so far (its line numbers, reasons and excerpts are the asset's
            # own); ids seen twice are settled later, across workers.
            block = (lines[i][0] if i in lines else b"" for i in range(1, n_lines + 1))
            for item in parse_lines(block, display, known, set()):
                line_no = int(item.origin.rsplit(":", 1)[1])
                if isinstance(item, RawAttempt):
                    parts.add(item, item.source, item.source_sha256, _extra_text(item.extra), file_no, line_no,
                              lines[line_no][1])
                else:
                    quarantined.append({"origin": item.origin, "attempt_id": item.attempt_id,
                                        "reason_code": item.reason_code, "reason": item.reason,
                                        "raw_excerpt": item.raw_excerpt, "file_no": file_no})
            lines.clear()
        facts.append({"file_no": file_no, "path": display, "sha256": digest.hexdigest(),
                      "size_bytes": os.path.getsize(path), "nonblank_lines": n_lines - n_blank})
    parts.flush()
    return {"parts": parts.paths, "quarantined": quarantined, "facts": facts, "maxrss_kb": _maxrss_kb()}


def _blocks(path: str, block: int, digest):
    """(data, line offsets, number of its first line, byte offset of data in the file) per block of whole lines."""
    import numpy as np

    carry, base, first_line = b"", 0, 1
    with open(path, "rb") as f:
        while True:
            chunk = f.read(block)
            digest.update(chunk)
            buf = carry + chunk
            cut = buf.rfind(b"\n") + 1 if chunk else len(buf)
            data, carry = buf[:cut], buf[cut:]
            if not data:
                return
            offs = np.concatenate([[0], np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1])
            if offs[-1] != len(data):
                offs = np.append(offs, len(data))
            yield data, offs, first_line, base
            first_line += len(offs) - 1
            base += len(data)


def stage_ingest_rowwise(ctx: dict) -> dict:
    import datetime as dt

    from pipelines.core.attempt_files import display_path
    from grader.catalogue import load_catalogue
    from pipelines.core.warehouse import insert_rows, run_script, transaction

    catalogue = load_catalogue()
    db = "warehouse_rowwise.duckdb"
    files = sorted(Path(ctx["inputs"]).glob("attempts-*.jsonl"))
    groups = [[(i, str(f), display_path(f)) for i, f in enumerate(files) if i % ctx["workers"] == w]
              for w in range(ctx["workers"])]
    parts_dir = Path(ctx["work"]) / "parts_rowwise"
    shutil.rmtree(parts_dir, ignore_errors=True)
    parts_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(ctx["workers"]) as pool:
        outs = pool.map(parse_file_group, [(g, set(catalogue), str(parts_dir), ctx["batch_rows"], ctx["block_mb"])
                                           for g in groups if g])
    t_parse = time.perf_counter() - t0
    parse_peak_kb = _maxrss_kb() + sum(o["maxrss_kb"] for o in outs)  # workers and this process, all at once
    parts = sorted(p for o in outs for p in o["parts"])
    facts = {f["file_no"]: f for o in outs for f in o["facts"]}
    quarantined = [q for o in outs for q in o["quarantined"]]
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    with _connect(ctx, db=db) as con, transaction(con):
        # Rows of raw_attempts have no order (every reader sorts), so DuckDB may insert them in parallel.
        con.execute("SET preserve_insertion_order = false")
        run_script(con, "ingest.clear")
        con.execute("CREATE TEMP TABLE bench_files (file_no INTEGER, sha256 VARCHAR)")
        con.executemany("INSERT INTO bench_files VALUES (?, ?)", [[k, f["sha256"]] for k, f in facts.items()])
        # BENCH-ONLY SQL: workers saw disjoint files, so an id admitted twice is found here; as in parse_lines,
        # the first occurrence (file order, then line order) stays and the others are quarantined.
        dups = con.execute("SELECT origin, attempt_id, file_no, byte_offset FROM read_parquet($parts) QUALIFY"
                           " row_number() OVER (PARTITION BY attempt_id ORDER BY file_no, line_no) > 1",
                           {"parts": parts or [""]}).fetchall() if parts else []
        # BENCH-ONLY SQL: the bulk form of insert_rows(con, "raw_attempts", rows) in pipelines/core/attempt_files.py.
        if parts:
            con.execute(f"INSERT INTO raw_attempts SELECT {', '.join('a.' + c for c in RAW_COLUMNS[:17])}, f.sha256,"
                        " a.extra, $run_id, $now FROM read_parquet($parts) a JOIN bench_files f USING (file_no)"
                        " WHERE a.origin NOT IN (SELECT unnest($dups))",
                        {"parts": parts, "run_id": RUN_ID, "now": now, "dups": [d[0] for d in dups] or [""]})
        for origin, aid, file_no, offset in dups:
            with open(files[file_no], "rb") as f:  # rare: the excerpt parse_lines would have kept
                f.seek(offset)
                excerpt = f.readline().rstrip(b"\n")[:200].decode("utf-8", "replace")
            quarantined.append({"origin": origin, "attempt_id": aid, "reason_code": "duplicate_id",
                                "reason": f"{aid}: attempt_id already ingested; ids must be unique",
                                "raw_excerpt": excerpt, "file_no": file_no})
        insert_rows(con, "quarantine", [{**{k: q[k] for k in ("origin", "attempt_id", "reason_code", "reason",
                                                                 "raw_excerpt")},
                                         "input_sha256": facts[q["file_no"]]["sha256"], "run_id": RUN_ID,
                                         "ingested_at": now} for q in quarantined])
        counted = con.execute("SELECT split_part(origin, ':', 1), count(*) FILTER (WHERE src = 'a'), count(*) FILTER"
                              " (WHERE src = 'q') FROM (SELECT origin, 'a' AS src FROM raw_attempts UNION ALL"
                              " SELECT origin, 'q' FROM quarantine) GROUP BY 1").fetchall()
        counts = {path: (a, q) for path, a, q in counted}
        insert_rows(con, "input_files", [{"path": f["path"], "sha256": f["sha256"], "size_bytes": f["size_bytes"],
                                          "accepted": counts.get(f["path"], (0, 0))[0],
                                          "quarantined": counts.get(f["path"], (0, 0))[1],
                                          "nonblank_lines": f["nonblank_lines"], "run_id": RUN_ID, "ingested_at": now}
                                         for f in facts.values()])
        insert_rows(con, "tasks", [{"task_id": c.task_id, "task_revision": c.revision, "family": c.family,
                                    "lineage": c.lineage, "run_id": RUN_ID,
                                    "public_card": json.dumps(c.public_card(), sort_keys=True, default=list)}
                                   for c in catalogue.values()])
        n_raw, n_q = con.execute("SELECT (SELECT count(*) FROM raw_attempts), "
                                 "(SELECT count(*) FROM quarantine)").fetchone()
    shutil.rmtree(parts_dir, ignore_errors=True)
    return {"rows": n_raw, "quarantined": n_q, "parse_s": round(t_parse, 2),
            "peak_kb": max(parse_peak_kb, _maxrss_kb())}  # the insert runs after the workers have exited


def stage_ingest(ctx: dict) -> dict:
    """The raw_attempts asset's own loader over the synthetic files, in one transaction, plus the tasks."""
    import datetime as dt

    from pipelines.core.attempt_files import load_attempt_files
    from grader.catalogue import load_catalogue
    from pipelines.core.warehouse import bulk_write, insert_rows, run_script, transaction

    catalogue = load_catalogue()
    files = sorted(Path(ctx["inputs"]).glob("attempts-*.jsonl"))
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    with _connect(ctx) as con:
        with bulk_write(con), transaction(con):  # as the asset does
            run_script(con, "ingest.clear")
            facts = load_attempt_files(con, files, set(catalogue), RUN_ID, now)
            insert_rows(con, "input_files", facts)
            insert_rows(con, "tasks", [{"task_id": c.task_id, "task_revision": c.revision, "family": c.family,
                                        "lineage": c.lineage, "run_id": RUN_ID,
                                        "public_card": json.dumps(c.public_card(), sort_keys=True, default=list)}
                                       for c in catalogue.values()])
        n_raw, n_q = con.execute("SELECT (SELECT count(*) FROM raw_attempts), (SELECT count(*) FROM quarantine)"
                                 ).fetchone()
    return {"rows": n_raw, "quarantined": n_q}


# ---- stages 2-6: grades, revalidation, ledger, trajectories, splits, release -------------------------------
def stage_grades(ctx: dict) -> dict:
    from pipelines.core.warehouse import run_script, transaction

    parts = sorted(str(p) for p in Path(ctx["inputs"]).glob("grades-*.parquet"))
    with _connect(ctx) as con, transaction(con):
        con.execute("SET preserve_insertion_order = false")  # as for raw_attempts: no reader relies on row order
        run_script(con, "grading.set_version", {"grader_version": "0.3.0"})
        con.execute("DELETE FROM graded_attempts")
        # BENCH-ONLY SQL: the bulk form of commit_grades() in pipelines/grading/passes.py (rows the grader would
        # stream).
        con.execute(f"INSERT INTO graded_attempts SELECT {', '.join(GRADE_COLUMNS)} FROM read_parquet($parts)",
                    {"parts": parts})
        con.execute("DELETE FROM fingerprints")
        con.execute("INSERT INTO fingerprints VALUES ('fp-bench', '{\"gpu_name\": \"NVIDIA H200\"}', 'bench-grading')")
        n = con.execute("SELECT count(*) FROM current_grades").fetchone()[0]
    return {"rows": n}


def stage_revalidation(ctx: dict) -> dict:
    from grader.labels import TIE_BAND_LOG2
    from pipelines.core.warehouse import run_script, transaction

    with _connect(ctx) as con:
        with transaction(con):
            run_script(con, "revalidation.rebuild", {"tie_band": TIE_BAND_LOG2, "run_id": RUN_ID})
        return {"rows": con.execute("SELECT count(*) FROM revalidated_records").fetchone()[0]}


def stage_ledger(ctx: dict) -> dict:
    from pipelines.core.warehouse import load_sql, query_dicts, run_script, transaction

    with _connect(ctx) as con:
        with transaction(con):
            run_script(con, "accounting.rebuild", {"run_id": RUN_ID})
        c = query_dicts(con, load_sql("accounting.conservation"))[0]
        states = dict(con.execute("SELECT terminal_state, count(*) FROM ledger GROUP BY ALL ORDER BY ALL").fetchall())
    # The ledger's promise: every input line is one ledger row with exactly one terminal state.
    ok = (c["ledger_rows"] == c["ledger_keys"] == c["input_lines"] == c["raw_attempts"] + c["quarantined"]
          and c["unaccounted"] == 0)
    return {"rows": c["ledger_rows"], "conserved": ok, "terminal_states": states}


def stage_trajectories(ctx: dict) -> dict:
    from pipelines.core.warehouse import load_sql, query_dicts, run_script, transaction

    with _connect(ctx) as con:
        with transaction(con):
            run_script(con, "trajectories.rebuild", {"run_id": RUN_ID})
        summary = query_dicts(con, load_sql("trajectories.summary"))[0]
        bad = len(query_dicts(con, load_sql("trajectories.membership")))  # the asset check: every attempt in one slot
    return {"rows": summary["trajectories"], "membership_violations": bad,
            "mean_turns": round(float(summary["mean_turns"]), 3)}


def stage_splits(ctx: dict) -> dict:
    from grader.catalogue import load_catalogue
    from pipelines.curation.families import catalogue_tasks
    from pipelines.curation.split_policy import DEFAULT_POLICY, build_manifest
    from pipelines.core.warehouse import insert_rows, load_sql, query_dicts, run_script, transaction

    manifest = build_manifest(DEFAULT_POLICY, catalogue_tasks(load_catalogue().values()))
    rows = [{"task_id": r.task_id, "family": r.family, "lineage": r.lineage, "workload_key": r.workload_key,
             "split": r.split.value, "split_version": manifest.version, "manifest_sha256": manifest.content_hash,
             "run_id": RUN_ID} for r in manifest.rows]
    with _connect(ctx) as con:
        with transaction(con):
            run_script(con, "splits.clear")
            insert_rows(con, "split_manifest", rows)
        counts = {r["split"]: r["attempts"] for r in query_dicts(con, load_sql("splits.split_counts"))}
        unassigned = len(query_dicts(con, load_sql("splits.unassigned_tasks")))
    return {"rows": sum(counts.values()), "attempts_by_split": counts, "unassigned_tasks": unassigned}


def stage_release(ctx: dict) -> dict:
    """The release asset's own export: pipelines.publishing.release_files.export_configs, one zstd parquet shard per
    config."""
    from pipelines.publishing.release_files import export_configs

    root = Path(ctx["work"]) / "release"
    shutil.rmtree(root, ignore_errors=True)
    with _connect(ctx) as con:
        rows = export_configs(con, root)
    return {"rows": sum(rows.values()), "shards": sum(1 for _ in root.rglob("*.parquet")),
            "bytes": sum(p.stat().st_size for p in root.rglob("*.parquet"))}


def stage_floor(ctx: dict) -> dict:
    """The physical floor: DuckDB reads every released shard and writes it again (same format), nothing else."""
    from pipelines.core.warehouse import copy_parquet

    src, out = Path(ctx["work"]) / "release" / "data", Path(ctx["work"]) / "floor"
    shutil.rmtree(out, ignore_errors=True)
    rows = 0
    with _connect(ctx, db=None) as con:
        for shard in sorted(src.rglob("*.parquet")):
            target = out / shard.parent.name / shard.name
            target.parent.mkdir(parents=True, exist_ok=True)
            copy_parquet(con, f"SELECT * FROM read_parquet('{shard}')", target)
            rows += con.execute(f"SELECT count(*) FROM read_parquet('{target}')").fetchone()[0]
    return {"rows": rows}


def stage_json_floor(ctx: dict) -> dict:
    """For scale only: DuckDB's own JSON reader turning the raw JSONL into parquet (no validation at all)."""
    out = Path(ctx["work"]) / "json_floor"
    shutil.rmtree(out, ignore_errors=True)
    with _connect(ctx, db=None) as con:
        rows = _copy_sharded(con, f"SELECT * FROM read_json('{ctx['inputs']}/attempts-*.jsonl', "
                                  "format='newline_delimited', ignore_errors=true, maximum_object_size=1048576)",
                             out, ctx)
    return {"rows": rows}


def _copy_sharded(con, query: str, out: Path, ctx: dict) -> int:
    """COPY a query to zstd parquet shards of about shard_mb, renamed the way the Hub expects. Row groups are
    bounded in rows: DuckDB's default (122,880 rows) holds ~0.5 GB of sources in memory per writer."""
    out.mkdir(parents=True, exist_ok=True)
    con.execute(f"COPY ({query}) TO '{out}' (FORMAT parquet, COMPRESSION zstd, FILE_SIZE_BYTES '{ctx['shard_mb']}MB', "
                f"ROW_GROUP_SIZE {ctx['row_group']}, FILENAME_PATTERN 'part_{{i}}', OVERWRITE_OR_IGNORE)")
    shards = sorted(out.glob("part_*.parquet"), key=lambda p: int(p.stem.split("_")[1]))
    for i, p in enumerate(shards):
        p.rename(out / f"train-{i:05d}-of-{len(shards):05d}.parquet")
    return con.execute(f"SELECT count(*) FROM read_parquet('{out}/*.parquet')").fetchone()[0]


def _connect(ctx: dict, db: str | None = "warehouse.duckdb"):
    """A warehouse file under the work dir (schema ensured by pipelines.core.warehouse) or, with db=None, a scratch
    in-memory DuckDB; either with the run's thread, memory and spill settings."""
    import contextlib

    import duckdb

    from pipelines.core import warehouse as wh

    @contextlib.contextmanager
    def cm():
        with (wh.connect(Path(ctx["work"]) / db) if db else contextlib.closing(duckdb.connect())) as con:
            con.execute(f"SET threads = {ctx['threads']}")
            con.execute(f"SET memory_limit = '{ctx['duckdb_mem']}'")
            con.execute(f"SET temp_directory = '{Path(ctx['work']) / 'duckdb_tmp'}'")
            yield con
    return cm()


def _maxrss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---- driver ---------------------------------------------------------------------------------------------
STAGES = {"ingest": stage_ingest, "grades": stage_grades, "revalidation": stage_revalidation, "ledger": stage_ledger,
          "trajectories": stage_trajectories, "splits": stage_splits, "release": stage_release}
REFERENCES = {"floor": stage_floor, "json_floor": stage_json_floor, "ingest_rowwise": stage_ingest_rowwise,
              "ingest_check": None}
PREIMPORT = {"ingest": ["pipelines.core.attempt_files"], "ingest_rowwise": ["pipelines.core.attempt_files"],
             "revalidation": ["assets.revalidation"], "release": ["assets.release"]}


def stage_ingest_check(ctx: dict) -> dict:
    """The data path's ingest against the row-by-row reference: the same rows, quarantine and file counts."""
    keys = {"raw_attempts": [c for c in RAW_COLUMNS if c not in ("source", "extra")] + ["input_sha256",
                                                                                        "CAST(extra AS VARCHAR)"],
            "quarantine": ["origin", "attempt_id", "reason_code", "reason", "raw_excerpt", "input_sha256"],
            "input_files": ["path", "sha256", "size_bytes", "accepted", "quarantined", "nonblank_lines"]}
    out = {}
    with _connect(ctx) as con:
        con.execute(f"ATTACH '{Path(ctx['work']) / 'warehouse_rowwise.duckdb'}' AS rw (READ_ONLY)")
        for table, cols in keys.items():
            sel = ", ".join(cols)
            # BENCH-ONLY SQL: symmetric difference, duplicates counted (EXCEPT ALL both ways).
            out[f"{table}_diff"] = con.execute(
                f"SELECT (SELECT count(*) FROM (SELECT {sel} FROM {table} EXCEPT ALL SELECT {sel} FROM rw.{table}))"
                f" + (SELECT count(*) FROM (SELECT {sel} FROM rw.{table} EXCEPT ALL SELECT {sel} FROM {table}))"
            ).fetchone()[0]
        out["rows"] = con.execute("SELECT count(*) FROM raw_attempts").fetchone()[0]
    return out


REFERENCES["ingest_check"] = stage_ingest_check


def _stage_entry(name: str, ctx: dict, conn) -> None:
    """In a fresh spawned process: import, then time the stage alone; report seconds and RSS high-water."""
    import importlib

    for mod in ["duckdb", "pyarrow.parquet", "pipelines.core.warehouse", "pipelines.core.rawattempt",
                "grader.catalogue", *PREIMPORT.get(name, [])]:
        importlib.import_module(mod)
    try:
        t0 = time.perf_counter()
        out = {**STAGES, **REFERENCES}[name](ctx)
        out["seconds"] = time.perf_counter() - t0
        out.setdefault("peak_kb", _maxrss_kb())
        conn.send(out)
    except BaseException as e:  # noqa: BLE001 - the driver prints it and stops
        import traceback

        conn.send({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})


def run_stage(name: str, ctx: dict) -> dict:
    spawn = mp.get_context("spawn")
    ours, theirs = spawn.Pipe(duplex=False)
    p = spawn.Process(target=_stage_entry, args=(name, ctx, theirs))
    p.start()
    theirs.close()
    out = ours.recv()
    p.join()
    if "error" in out:
        raise SystemExit(f"stage {name} failed: {out['error']}\n{out['traceback']}")
    return out


def generate(ctx: dict, n: int, bad_rate: float, seed: int, regen: bool) -> dict:
    from grader.catalogue import load_catalogue

    inputs = Path(ctx["inputs"])
    manifest_path = inputs / "manifest.json"
    want = {"gen_version": GEN_VERSION, "n": n, "bad_rate": bad_rate, "seed": seed}
    if not regen and manifest_path.is_file():
        m = json.loads(manifest_path.read_text())
        if {k: m.get(k) for k in want} == want:
            return m
    shutil.rmtree(inputs, ignore_errors=True)
    inputs.mkdir(parents=True)
    tasks = {c.task_id: c.revision for c in load_catalogue().values()}
    n_files = max(2, math.ceil(n / ATTEMPTS_PER_FILE))  # at least two: ids repeated across parse workers
    sizes = [n // n_files + (i < n % n_files) for i in range(n_files)]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(ctx["workers"]) as pool:
        files = pool.map(gen_file, [(k, sizes[k], bad_rate, seed, str(inputs), tasks) for k in range(n_files)])
    m = {**want, "files": files, "generate_s": round(time.perf_counter() - t0, 1),
         "jsonl_bytes": sum(p.stat().st_size for p in inputs.glob("*.jsonl")),
         "accepted": sum(f["accepted"] for f in files), "lines": sum(f["lines"] for f in files)}
    manifest_path.write_text(json.dumps(m, indent=1))
    return m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="synthetic attempts (1000000 for the full run)")
    ap.add_argument("--workdir", default="/tmp/kerneltraj-bench-data-path")
    ap.add_argument("--workers", type=int, default=2, help="parse (and generator) processes")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB threads")
    ap.add_argument("--duckdb-mem", default="1GB", help="DuckDB memory_limit per stage")
    ap.add_argument("--batch-rows", type=int, default=8_000, help="rows per parquet part written by a parse worker")
    ap.add_argument("--shard-mb", type=int, default=256, help="target size of a release shard")
    ap.add_argument("--bad-rate", type=float, default=0.002, help="share of malformed input lines")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--regen", action="store_true", help="regenerate the inputs even when cached")
    ap.add_argument("--no-json-floor", action="store_true", help="skip DuckDB's own JSON-to-parquet reference")
    ap.add_argument("--compare-rowwise", action="store_true",
                    help="also run the row-by-row reference ingest and check it row for row against the data path's")
    ap.add_argument("--block-mb", type=int, default=32, help="JSONL bytes per vectorised ingest block")
    ap.add_argument("--row-group", type=int, default=16_384, help="rows per parquet row group in the release")
    ap.add_argument("--keep", action="store_true", help="keep the warehouse and release under --workdir")
    ap.add_argument("--out", help="also write the measurements as JSON here")
    a = ap.parse_args(argv)
    work = Path(a.workdir)
    ctx = {"work": str(work), "inputs": str(work / "inputs"), "workers": a.workers, "threads": a.threads,
           "duckdb_mem": a.duckdb_mem, "batch_rows": a.batch_rows, "shard_mb": a.shard_mb, "block_mb": a.block_mb,
           "row_group": a.row_group}
    load0 = os.getloadavg()
    gen = generate(ctx, a.n, a.bad_rate, a.seed, a.regen)
    print(f"inputs: {gen['lines']:,} lines in {len(gen['files'])} files, {gen['jsonl_bytes'] / 2**30:.2f} GiB JSONL "
          f"({gen['accepted']:,} valid; generated in {gen['generate_s']} s, cached under {ctx['inputs']})", flush=True)
    for p in ("warehouse.duckdb", "warehouse.duckdb.wal", "duckdb_tmp"):
        shutil.rmtree(work / p, ignore_errors=True) if (work / p).is_dir() else (work / p).unlink(missing_ok=True)
    results = {}
    names = [*STAGES, "floor", *([] if a.no_json_floor else ["json_floor"]),
             *(["ingest_rowwise", "ingest_check"] if a.compare_rowwise else [])]
    for name in names:
        results[name] = run_stage(name, ctx)
        r = results[name]
        print(f"  {name:<13} {r['seconds']:8.1f} s  {r['peak_kb'] / 1024:7.0f} MiB  "
              f"{json.dumps({k: v for k, v in r.items() if k not in ('seconds', 'peak_kb')}, default=str)}", flush=True)
    problems = check(results, gen)
    report(results, gen, a, load0, problems)
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "inputs": {k: v for k, v in gen.items() if k != "files"},
                                           "results": results, "problems": problems,
                                           "loadavg": [load0, os.getloadavg()]}, indent=1, default=str))
    if not a.keep:
        for p in ("warehouse.duckdb", "release", "floor", "json_floor", "duckdb_tmp"):
            shutil.rmtree(work / p, ignore_errors=True) if (work / p).is_dir() else (work / p).unlink(missing_ok=True)
    return 1 if problems else 0


def check(results: dict, gen: dict) -> list[str]:
    """The data path must be right before its speed means anything."""
    problems = []
    bad = sum(sum(f["bad"].values()) for f in gen["files"])
    if results["ingest"]["rows"] != gen["accepted"] or results["ingest"]["quarantined"] != bad:
        problems.append(f"ingest admitted {results['ingest']['rows']} / quarantined "
                        f"{results['ingest']['quarantined']}, the generator wrote {gen['accepted']} valid and "
                        f"{bad} malformed lines")
    if not results["ledger"]["conserved"]:
        problems.append("ledger: some input line has no terminal state, or more than one")
    if results["trajectories"]["membership_violations"] or results["splits"]["unassigned_tasks"]:
        problems.append("trajectory membership or split assignment check failed")
    if results["floor"]["rows"] != results["release"]["rows"]:
        problems.append("the floor copied a different number of rows than the release wrote")
    if "ingest_check" in results:
        diffs = {k: v for k, v in results["ingest_check"].items() if k.endswith("_diff") and v}
        if diffs or results["ingest_rowwise"]["rows"] != results["ingest"]["rows"]:
            problems.append(f"the data path's ingest differs from the row-by-row one: {diffs}")
    return problems


def report(results: dict, gen: dict, a, load0, problems: list[str]) -> None:
    path = [k for k in STAGES]
    total = sum(results[k]["seconds"] for k in path)
    peak = max(results[k]["peak_kb"] for k in path) / 1024
    floor = results["floor"]["seconds"]
    print(f"\nData path, {a.n:,} attempts ({gen['jsonl_bytes'] / 2**30:.2f} GiB JSONL), {a.workers} parse workers, "
          f"DuckDB threads={a.threads} memory_limit={a.duckdb_mem}; machine: {os.cpu_count()} cores, "
          f"load average {load0[0]:.1f} before / {os.getloadavg()[0]:.1f} after (shared, loaded)")
    print(f"| {'stage':<16} | {'seconds':>8} | {'peak RSS MiB':>12} | {'rows':>10} |")
    print(f"|{'-' * 18}|{'-' * 10}|{'-' * 14}|{'-' * 12}|")
    for k in [*path, "floor", "json_floor", "ingest_rowwise"]:
        if k in results:
            r = results[k]
            label = {"floor": "floor*", "json_floor": "json floor**", "ingest_rowwise": "ingest rowwise***"}.get(k, k)
            print(f"| {label:<16} | {r['seconds']:8.1f} | {r['peak_kb'] / 1024:12.0f} | {r['rows']:>10,} |")
    print(f"| {'data path total':<16} | {total:8.1f} | {peak:12.0f} | {'':>10} |")
    print(f"\ntotal / floor = {total:.1f} / {floor:.1f} = {total / floor:.2f}x  (target <= 3x); "
          f"peak {peak:.0f} MiB (target < 2048 MiB)")
    print("* floor: DuckDB reads every released parquet file and writes it again (zstd, same row groups), "
          "nothing else.\n** json floor: DuckDB's read_json over the raw JSONL to parquet, no validation (for scale).")
    if "ingest_check" in results:
        print("*** ingest rowwise: the reference ingest (parse_lines on every line in parse workers, bulk insert); "
              "not in the total. Row-for-row check against the data path's ingest: "
              + ", ".join(f"{k} {v}" for k, v in results["ingest_check"].items() if k.endswith("_diff")))
    print("ingest: pipelines.core.attempt_files.load_attempt_files (DuckDB fast path, parse_line for the rest, "
          "one streamed insert).")
    print("peak RSS: the stage process's high-water mark; for an ingest, the larger of (parse phase: the stage "
          "process plus every parse worker, summed) and the insert phase that follows.")
    for p in problems:
        print("PROBLEM:", p)


if __name__ == "__main__":
    raise SystemExit(main())
