"""Assemble the demo corpus from the candidate files: deterministic, byte-stable output.

    python3 demo/build_corpus.py            # rewrite the committed files under demo/
    python3 demo/build_corpus.py --out DIR  # write the same layout under DIR
    python3 demo/build_corpus.py --check    # exit 1 if a committed file is stale

Writes attempts.jsonl (the raw agent attempts), malformed.jsonl (rows that must be quarantined),
checkpoints/{baseline,treatment}.jsonl (the learning comparison) and build/oversized.jsonl (rows
too big to commit; build/ is git-ignored). Timestamps come from fixed bases and token counts from
a hash of the attempt id, so two builds give the same bytes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import importlib.util
import json
import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load_manifest():
    # loaded by path under a private name: the demo folder is not a package and must not shadow one
    spec = importlib.util.spec_from_file_location("kerneltraj_demo_manifest", HERE / "manifest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


manifest = _load_manifest()

BASE_MAIN = dt.datetime(2026, 3, 2, 9, 0, 0, tzinfo=dt.timezone.utc)
BASE_CHECKPOINT = {"baseline": dt.datetime(2026, 3, 23, 9, 0, 0, tzinfo=dt.timezone.utc),
                   "treatment": dt.datetime(2026, 3, 30, 9, 0, 0, tzinfo=dt.timezone.utc)}
TRAJECTORY_SPACING = dt.timedelta(minutes=47)
FEEDBACK_GAP = dt.timedelta(seconds=30)
"""Time between one turn's end and the next turn's start (the agent reads its grade)."""
_TRITON_IMPORT = re.compile(r"^\s*(import triton|from triton)", re.M)


def language_of(source: str) -> str:
    """`triton` when the candidate imports Triton, else `pytorch` (no CUDA candidates in the demo)."""
    return "triton" if _TRITON_IMPORT.search(source) else "pytorch"


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _tokens(attempt_id: str, source: str) -> int:
    # roughly four bytes per code token, plus a reasoning share that varies per attempt but not per build
    spread = int(hashlib.sha256(attempt_id.encode()).hexdigest()[:8], 16) % 700
    return len(source.encode()) // 4 + 120 + spread


def _trajectory(agent: str, model: str, budget: int, rate: int, task_id: str, trajectory_id: str,
                turns: list[tuple[str, str]], folder: Path, start: dt.datetime, extra: dict) -> list[dict]:
    rows, clock = [], start
    for turn, (stem, kind) in enumerate(turns, 1):
        path = folder / task_id / f"{stem}.py"
        source = path.read_text()
        attempt_id = f"{trajectory_id}.t{turn}"
        tokens = _tokens(attempt_id, source)
        if tokens > budget:
            raise ValueError(f"{attempt_id}: {tokens} tokens exceed the declared budget {budget}")
        finished = clock + dt.timedelta(seconds=math.ceil(tokens / rate) + 5)
        rows.append({
            "attempt_id": attempt_id, "task_id": task_id, "agent": agent, "model": model,
            "trajectory_id": trajectory_id, "turn": turn, "language": language_of(source),
            "source": source, "entry_point": "run", "generation_tokens": tokens,
            "generation_budget_tokens": budget, "started_at": _stamp(clock), "finished_at": _stamp(finished),
            "extra": {**extra, "intended": kind, "candidate_file": path.relative_to(HERE.parent).as_posix()},
        })
        clock = finished + FEEDBACK_GAP
    return rows


def main_rows() -> list[dict]:
    rows, seen = [], {}
    for i, (agent, task_id, turns) in enumerate(manifest.TRAJECTORIES):
        model, budget, rate = manifest.AGENTS[agent]
        seen[(agent, task_id)] = n = seen.get((agent, task_id), 0) + 1
        rows += _trajectory(agent, model, budget, rate, task_id, f"demo.{agent}.{task_id}.{n}", turns,
                            HERE / "candidates", BASE_MAIN + i * TRAJECTORY_SPACING, {})
    return rows


def checkpoint_rows(arm: str) -> list[dict]:
    agent = manifest.CHECKPOINT_AGENT
    rate = manifest.AGENTS[agent][2]
    rows = []
    for i, (task_id, turns) in enumerate(manifest.CHECKPOINTS[arm]):
        rows += _trajectory(agent, manifest.CHECKPOINT_MODELS[arm], manifest.CHECKPOINT_BUDGETS[task_id], rate,
                            task_id, f"ckpt.{arm}.{task_id}.1", turns, HERE / "checkpoints" / "candidates" / arm,
                            BASE_CHECKPOINT[arm] + i * TRAJECTORY_SPACING, {"checkpoint": arm})
    return rows


_OK_SOURCE = "import torch\n\n\ndef run(x):\n    return x.clone()\n"


def _template(n: int) -> dict:
    t = BASE_MAIN - dt.timedelta(days=1) + n * FEEDBACK_GAP
    return {"attempt_id": f"demo.malformed.{n:02d}", "task_id": "gelu_fp32", "agent": "wren",
            "model": manifest.AGENTS["wren"][0], "trajectory_id": f"demo.malformed.{n:02d}", "turn": 1,
            "language": "pytorch", "source": _OK_SOURCE, "entry_point": "run", "generation_tokens": 64,
            "generation_budget_tokens": 4096, "started_at": _stamp(t), "finished_at": _stamp(t + FEEDBACK_GAP),
            "extra": {"intended": "malformed"}}


def _line(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True).encode()


def malformed_cases(first_attempt_id: str) -> list[tuple[str, str, bytes]]:
    """(expected reason code, why the row is bad, raw row) for the committed malformed.jsonl, in order.

    The duplicate_id row reuses the first id of attempts.jsonl: it is quarantined when both files are
    ingested with one set of seen ids (attempts.jsonl first), as the ingest asset does.
    """
    cases: list[tuple[str, str, bytes]] = []

    def add(code: str, why: str, row: bytes) -> None:
        cases.append((code, why, row))

    add("bad_json", "truncated JSON object", _line(_template(1))[:90])
    rec = _template(2)
    del rec["source"]
    add("missing_field", "no source field", _line(rec))
    add("unknown_task", "task id not in the catalogue", _line({**_template(3), "task_id": "softmax_cols_fp32"}))
    add("duplicate_id", "attempt id already used in attempts.jsonl",
        _line({**_template(4), "attempt_id": first_attempt_id}))
    raw = _line({**_template(5), "source": "def run(x):\n    return x  # @@RAW@@\n"})
    add("bad_encoding", "raw non-UTF-8 bytes inside the row", raw.replace(b"@@RAW@@", b"caf\xe9 \xff\xfe"))
    add("bad_language", "language is not triton, pytorch or cuda", _line({**_template(6), "language": "mojo"}))
    add("bad_type", "turn 0 (turns are 1-based)", _line({**_template(7), "turn": 0}))
    add("bad_id", "path traversal in the attempt id", _line({**_template(8), "attempt_id": "demo/../../etc/passwd"}))
    add("bad_id", "absolute path as the trajectory id", _line({**_template(9), "trajectory_id": "/etc/passwd"}))
    add("bad_timestamp", "started_at is not ISO-8601", _line({**_template(10), "started_at": "yesterday 9am"}))
    add("bad_source", "NUL byte in the source", _line({**_template(11), "source": "def run(x):\n    return x\x00\n"}))
    add("bad_encoding", "unpaired UTF-16 surrogate in the source",
        _line({**_template(12), "source": "def run(x):\n    return x  # \ud800\n"}))
    add("bad_type", "row is a JSON array, not an object", _line([1, 2, 3]))
    add("bad_type", "negative generation_tokens", _line({**_template(13), "generation_tokens": -5}))
    return cases


def oversized_cases() -> list[tuple[str, str, bytes]]:
    """Rows too large to commit; written under build/ at build time."""
    def big(n: int, size_bytes: int) -> dict:
        pad = "# " + "x" * 98 + "\n"
        return {**_template(n), "source": _OK_SOURCE + pad * (size_bytes // len(pad))}

    return [("oversized_row", "10 MB source: the row is over the 1 MiB line limit", _line(big(20, 10_000_000))),
            ("oversized_source", "300 kB source: over the 256 KiB source limit", _line(big(21, 300_000)))]


def _jsonl(rows: list[dict]) -> bytes:
    return b"".join(_line(r) + b"\n" for r in rows)


def outputs() -> dict[str, bytes]:
    """Relative path -> exact bytes of every file the build writes."""
    main = main_rows()
    files = {"attempts.jsonl": _jsonl(main),
             "malformed.jsonl": b"".join(row + b"\n" for _, _, row in malformed_cases(main[0]["attempt_id"])),
             "build/oversized.jsonl": b"".join(row + b"\n" for _, _, row in oversized_cases())}
    for arm in manifest.CHECKPOINTS:
        files[f"checkpoints/{arm}.jsonl"] = _jsonl(checkpoint_rows(arm))
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE, help="directory to write into (default: demo/)")
    ap.add_argument("--check", action="store_true", help="compare with the files on disk instead of writing")
    args = ap.parse_args(argv)
    stale = []
    for rel, data in outputs().items():
        path = args.out / rel
        if args.check:
            if rel.startswith("build/"):
                continue
            if not path.exists() or path.read_bytes() != data:
                stale.append(rel)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if stale:
        print(f"stale: {', '.join(stale)}; run python3 demo/build_corpus.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
