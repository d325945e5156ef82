"""Which experts grade away from 0 against themselves, run after run: the recorded acceptances read together.

    python3 bench/expert_bias.py [--runs docs/measurements] [--min-runs 5]

Every acceptance grades each catalogue expert as a candidate against itself (`expert:<task>`), and its reward should
be 0. One run's spread says how noisy a grade is; the same sign run after run, on several cards and both pair orders,
says the protocol favours one side for that kernel. This reads every `acc/grades.jsonl` (or `.jsonl.gz`) under
`--runs` (the committed GPU runs), keeps the experts' unfloored grades, and prints one line an expert: the runs and
grades, the median reward, how many grades were above 0, and a two-sided sign test's p-value (no assumption on the
spread); then each kind of card apart, and each expert's grades split by whether its worker was started for the
grade or kept from an earlier one (a worker's age, its allocator's history, is one difference between a pair's two
sides). Needs no GPU.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.recorded import grade_files, jsonl_lines  # noqa: E402

COLUMNS = ("expert", "runs", "grades", "median reward", "above 0", "sign test p")

STARTED_S = 0.5
"""A grade whose expert phase took longer than this started the expert's worker (a CUDA start takes 1-2 s); a kept
worker's phase is tens of ms."""


def sign_test_p(above: int, n: int) -> float:
    """Two-sided p-value of `above` of `n` nonzero signs under a fair coin."""
    if n == 0:
        return 1.0
    k = min(above, n - above)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


MIN_VERSION = "0.11.0"
"""The oldest grader whose grades are read: the timing loops interleaved behind launch gates since 0.10.0-0.11.0; the
runs of 2026-12-01 (grader 0.7.0, committed gzipped) timed another way."""


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def read_runs(root: Path, min_version: str = MIN_VERSION) -> list[dict]:
    """The experts' unfloored self-grades of every run under `root` made by grader `min_version` or later: {run,
    card, expert, reward, started}."""
    rows = []
    for grades in grade_files(root):
        run = grades.parent.parent.name
        card = "h200" if "-h200-" in run else "h100" if "-h100-" in run else "other"
        for line in jsonl_lines(grades):
            r = json.loads(line)
            if (r.get("attempt_id", "").startswith("expert:") and r.get("status") == "correct"
                    and _version(r.get("grader_version") or "0") >= _version(min_version)):
                rows.append({"run": run, "card": card, "expert": r["attempt_id"][len("expert:"):],
                             "reward": float(r["reward"]),
                             "started": float((r.get("phase_seconds") or {}).get("expert", 0.0)) > STARTED_S})
    return rows


def table(rows: list[dict], min_runs: int) -> list[list[str]]:
    """One line an expert seen in at least `min_runs` runs, the most one-sided first."""
    by = collections.defaultdict(list)
    for r in rows:
        by[r["expert"]].append(r)
    out = []
    for expert, got in by.items():
        runs = {r["run"] for r in got}
        if len(runs) < min_runs:
            continue
        rewards = [r["reward"] for r in got]
        above = sum(x > 0 for x in rewards)
        nonzero = sum(x != 0 for x in rewards)
        out.append((sign_test_p(above, nonzero), expert, len(runs), len(rewards), statistics.median(rewards), above))
    out.sort()
    return [[expert, str(runs), str(n), f"{med:+.4f}", f"{above}/{n}", f"{p:.2g}"]
            for p, expert, runs, n, med, above in out]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=ROOT / "docs" / "measurements")
    ap.add_argument("--min-runs", type=int, default=5, help="leave out experts seen in fewer runs")
    ap.add_argument("--min-version", default=MIN_VERSION, help="leave out grades of older graders")
    args = ap.parse_args(argv)
    rows = read_runs(args.runs, args.min_version)
    if not rows:
        print(f"no experts' grades under {args.runs}: expected */acc/grades.jsonl from bench/gpu_acceptance.py",
              file=sys.stderr)
        return 2
    cards = sorted({r["card"] for r in rows})
    parts = [("every card", rows)] + [(c, [r for r in rows if r["card"] == c]) for c in cards] + [
        (f"the expert's worker {how} for the grade", [r for r in rows if r["started"] is started])
        for how, started in (("started", True), ("kept", False))]
    for name, part in parts:
        print(f"== {name}: {len({r['run'] for r in part})} runs, {len(part)} experts' grades")
        print("\t".join(COLUMNS))
        for line in table(part, args.min_runs):
            print("\t".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
