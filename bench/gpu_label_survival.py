"""The label-survival device run: a release's grading passes on the GPU, records back to the warehouse here.

    # here, where Dagster and ../shared/data are (docs/label_survival.md has the whole recipe)
    kerneltraj device-plan --inputs ... --out .gpu_carry/survival
    # on the GPU machine (torch, triton, nvidia-ml-py, the standard library; no Dagster, no install step)
    python3 bench/gpu_label_survival.py --plan .gpu_carry/survival --state .survival_state --out $OUT/run \\
        --workers 8 --hard-stop-s 530
    # here again
    kerneltraj release --device-records docs/measurements/<run>/records

It grades the plan's primary pass, then the isolated recheck, then the contention replay (five settings with
real co-tenant processes and NVML readings; `pipelines.grading.replay`), then the learning comparison's
checkpoints, appending each grade and setting to OUT as it arrives (`pipelines.grading.device_run`). Run it
again with the same --state to resume a run that was cut off: what is recorded is not graded again.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.zygote import leave  # noqa: E402
from pipelines.grading.device_run import (ENV_FILE, GRADES_FILE, PASSES, SETTINGS_FILE, DeviceRun, Records,  # noqa: E402
                                          environment, hard_stop, read_jsonl)


def summary(state: Path) -> str:
    """Counts by pass and status, and one line per replay setting: enough to see what came back."""
    grades = read_jsonl(state / GRADES_FILE)
    by = collections.Counter((g["pass"], g["result"]["status"]) for g in grades)
    out = ["== grades by pass and status"]
    out += [f"  {p}\t{s}\t{n}" for (p, s), n in sorted(by.items())]
    out.append("== contention settings")
    for s in read_jsonl(state / SETTINGS_FILE):
        r = s["row"]
        svc = f"service p50/p99 {r.get('service_p50_ms')}/{r.get('service_p99_ms')} ms" if r.get("service_requests") \
            else ""
        out.append(f"  {r['setting']}\t{r['grades_recorded']}/{r['grades_requested']} in {r['wall_s']:.0f} s\t"
                   f"{r['verdict']} {r['flags']}\t{svc}\t{r['error'] or ''}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", type=Path, required=True, help="plan folder written by `kerneltraj device-plan`")
    ap.add_argument("--state", type=Path, required=True, help="folder kept between calls: a later call resumes")
    ap.add_argument("--out", type=Path, required=True, help="records folder (all records so far, this call's too)")
    ap.add_argument("--resume-from", type=Path, metavar="RECORDS", help="a records folder that came back from an "
                    "earlier call (another machine too): seeds an empty --state, so this call grades only the rest")
    ap.add_argument("--workers", type=int, default=8, help="grader slots at once")
    ap.add_argument("--phases", default=",".join(PASSES), help=f"comma-separated subset of {','.join(PASSES)}")
    ap.add_argument("--settings", help="comma-separated replay settings (isolated always runs; default all five)")
    ap.add_argument("--pairs", type=int, help="replay pairs (default the device's, 16 on a GPU)")
    ap.add_argument("--graders", type=int, help="k graders of the time_sliced setting (default 4 on a GPU)")
    ap.add_argument("--max-primary-total-s", type=float, help="replay only pairs whose primary grade took at most "
                    "this long (0: no cap; default none on a GPU, 1.5 s on the CPU)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="no new phase or replay setting starts after this")
    ap.add_argument("--hard-stop-s", type=float, default=540.0, help="the process ends here whatever it is doing")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    records = Records(args.state, args.out, args.resume_from)
    hard_stop(args.hard_stop_s, records, leave)
    env = environment()
    records.append(ENV_FILE, env)
    records.log(f"device run: {env['device'].get('gpu_name') or env['device'].get('kind')} torch {env['torch']} "
                f"triton {env['triton']} python {env['python']} grader {env['grader_version']}")
    phases = tuple(p for p in args.phases.split(",") if p)
    unknown = set(phases) - set(PASSES)
    if unknown:
        ap.error(f"--phases: unknown {sorted(unknown)}; known: {', '.join(PASSES)}")
    overrides = {k: v for k, v in (("pairs", args.pairs), ("graders", args.graders),
                                   ("settings", args.settings.split(",") if args.settings else None),
                                   ("max_primary_total_s", args.max_primary_total_s)) if v is not None}
    run = DeviceRun(args.plan, records, args.workers, str((args.state / "compile_cache").absolute()),
                    t0 + args.budget_s, overrides, phases)
    complete = run.run()
    text = summary(args.state)
    records.log(text)
    for d in records.dirs:
        (d / "summary.txt").write_text(text + "\n")
    return 0 if complete else 2


if __name__ == "__main__":
    leave(main())
