"""Grade the demo corpus through the sealed grader and compare each grade with its author's intent.

    python3 demo/compare_intent.py [--device cpu|cuda|auto] [--workers N] [--out grades.jsonl] [FILE ...]

FILEs default to attempts.jsonl and both checkpoint sets. Prints a table of intent against status and
every attempt whose grade disagrees with its intent; exits 0 either way (a disagreement is a finding
about the grader or about the label, to be read, not a failed build).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DEFAULT_FILES = ("demo/attempts.jsonl", "demo/checkpoints/baseline.jsonl", "demo/checkpoints/treatment.jsonl")
EXPECTED = {"correct_fast": {"correct"}, "correct_slow": {"correct"}, "wrong_output": {"wrong_output"},
            "compile_error": {"compile_error"}, "runtime_error": {"runtime_error"}, "crash": {"crashed"},
            "hang": {"timeout"}}
FLOORED = {"wrong_output", "cheat_flagged", "compile_error", "runtime_error", "crashed", "timeout"}


def expected(intent: str) -> set[str]:
    """Statuses that agree with an intent: a cheat agrees with any floored status."""
    return FLOORED if intent.startswith("cheat:") else EXPECTED[intent]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--out", type=Path, default=None, help="write one JSON line per grade here")
    args = ap.parse_args(argv)

    from grader.contract import GradeRequest
    from grader.service import GraderService
    from pipelines.core.rawattempt import RawAttempt, parse_lines

    rows = []
    for f in args.files:
        rows += [r for r in parse_lines((ROOT / f).read_bytes().split(b"\n"), f) if isinstance(r, RawAttempt)]
    intent = {r.attempt_id: r.extra["intended"] for r in rows}
    reqs = [GradeRequest(attempt_id=r.attempt_id, task_id=r.task_id, source=r.source, language=r.language,
                         entry_point=r.entry_point, seed=args.seed,
                         timeout_s=20.0 if intent[r.attempt_id] == "hang" else 90.0) for r in rows]
    t0 = time.time()
    grades = []
    out = args.out.open("w") if args.out else None
    with GraderService(workers=args.workers, device=args.device) as svc:
        for res in svc.grade(reqs):
            g = {"attempt_id": res.attempt_id, "intended": intent[res.attempt_id], "status": res.status.value,
                 "reason_code": res.reason_code.value, "reason": res.reason[:300],
                 "speedup_geomean": res.speedup_geomean, "reward": res.reward}
            grades.append(g)
            if out:
                out.write(json.dumps(g, sort_keys=True) + "\n")
                out.flush()
    if out:
        out.close()
    group = collections.Counter((g["intended"].split("-")[0], g["status"]) for g in grades)
    print(f"graded {len(grades)} attempts in {time.time() - t0:.0f} s\n\nintent -> status: count")
    for (i, s), n in sorted(group.items()):
        print(f"  {i:28s} {s:16s} {n}")
    print("\ndisagreements:")
    for g in sorted(grades, key=lambda g: g["attempt_id"]):
        if g["status"] not in expected(g["intended"]):
            print(f"  {g['attempt_id']:48s} {g['intended']:30s} {g['status']:14s} {g['reason'][:100]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
