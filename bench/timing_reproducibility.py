"""Timing reproducibility: the same attempts graded twice, each time in fresh workers.

    python bench/timing_reproducibility.py [--n 60] [--out DIR]

For every attempt correct in both grades: |log2(speedup_1 / speedup_2)|, reported as median and p95
by kernel-duration bucket (the candidate's median time), and the share of attempts whose
faster / slower / tie label (point estimate, tie band from grader.labels) changes between the grades,
plus the interval labels (with `ambiguous`) for comparison.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grading_throughput import corpus, pct  # noqa: E402
from grader.contract import GradeRequest, Status  # noqa: E402
from grader.labels import TIE_BAND_LOG2, point_label, speed_label  # noqa: E402

BUCKETS = ((0, 0.02, "< 20 us"), (0.02, 0.2, "20-200 us"), (0.2, 2.0, "0.2-2 ms"), (2.0, 1e9, ">= 2 ms"))


def progress(r) -> None:
    """One line per grade as it arrives: a run stopped early still shows what it did."""
    print(f"  {r.attempt_id}\t{r.status.value}\t{r.reward:+.3f}", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--cuda-l1", type=int, default=12)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from grader.service import GraderService, pick_device

    cuda = pick_device().startswith("cuda")
    reqs, extra = corpus(args.n or (60 if cuda else 8), args.cuda_l1, cuda)
    grades = []
    for rep in range(2):  # a new service each time: new zygote, new workers, new seeds
        with GraderService(mode="zygote", workers=args.workers or (6 if cuda else 2), catalogue_extra=extra) as svc:
            grades.append({r.attempt_id: r for r in svc.grade(
                [GradeRequest(**{**q.__dict__, "seed": 7919 * (rep + 1)}) for q in reqs], on_result=progress)})
    rows = []
    for aid, a in grades[0].items():
        b = grades[1][aid]
        if a.status is Status.CORRECT and b.status is Status.CORRECT:
            d = abs(math.log2(a.speedup_geomean / b.speedup_geomean))
            cand_ms = sorted(s.cand_ms for s in a.sizes)[len(a.sizes) // 2]
            rows.append({"attempt": aid, "delta": d, "cand_ms": cand_ms,
                         "p1": point_label(math.log2(a.speedup_geomean)),
                         "p2": point_label(math.log2(b.speedup_geomean)),
                         "i1": speed_label(a), "i2": speed_label(b)})
    status_changes = sum(grades[0][k].status != grades[1][k].status for k in grades[0])
    print(f"device: {'cuda' if cuda else 'cpu'}; attempts: {len(reqs)}; correct in both: {len(rows)}; "
          f"status changed: {status_changes}; tie band: +-{TIE_BAND_LOG2} log2")
    print("bucket (candidate median)\tn\tmedian |dlog2|\tp95 |dlog2|\tpoint-label changes\tinterval-label changes")
    for lo, hi, name in BUCKETS + ((0, 1e9, "all"),):
        sel = [r for r in rows if lo <= r["cand_ms"] < hi]
        if not sel:
            continue
        ds = [r["delta"] for r in sel]
        pch = sum(r["p1"] != r["p2"] for r in sel)
        ich = sum(r["i1"] != r["i2"] for r in sel)
        print(f"{name}\t{len(sel)}\t{pct(ds, 0.5):.4f}\t{pct(ds, 0.95):.4f}\t{pch}/{len(sel)}\t{ich}/{len(sel)}")
    outside = [r for r in rows if "tie" not in (r["p1"], r["p2"]) and r["p1"] != r["p2"]]
    print(f"label flips outside the tie band (faster<->slower): {len(outside)}/{len(rows)}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "reproducibility.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
