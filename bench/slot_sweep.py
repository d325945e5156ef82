"""Round 1 of the acceptance at several slot counts (or mixes), one after the other, in one device call, and one
table of them side by side.

    python bench/slot_sweep.py --out DIR [--runs 12,6,8,12] [--demo 48] [--cuda-l1 12] [--run-s 175]
                               [-- extra arguments for bench/gpu_acceptance.py]

Each run is `bench/gpu_acceptance.py --groups cuda_l1,demo --fresh-sample 0 --workers N`, round 1 only, in a
process of its own (a fresh service, an empty extension cache), stopped at `--run-s`. A run is `N` (slots) or
`NxD` (slots, demo attempts: `6x96` grades 96 of the demo corpus beside the CUDA-L1 sample, more attempts a task),
either followed by `+part` for each part the run switches on (`6+host_verify`: the acceptance's `--with`) or
`-part` for each it switches off (`8-task_workers`: its `--without`) or `@field=value` for each `Effort` field it sets
(`6@clip_reps=3@verify_timed=2`: its `--effort`), and
last by `:R/H` for a timing effort other than the device's default (`6:10/0.015`: at least 10 timed pairs a size,
stopping once the interval is within 0.015 either side; the acceptance's `--min-reps` and `--target-halfwidth`;
`6:10/0.015/1` with one warm-up pair a size, its `--warmup-pairs`).
Repeat a run (`12,6,8,12`) to see how far the machine's warming caches move the first: the sweep's first run finds
cold Triton and extension caches. H100 runs 89 and 90 (2026-12-05) graded round 1 at 1,955, 2,219 and 2,457 per
GPU-hour with 3, 4 and 6 slots, each grade's slot time growing with the slots (5.4, 6.4, 8.7 s); the H200 with
its 12 (`--workers auto`) spent 22.9 s a grade (run 82).

The device tool brings back only a few files from a call, so DIR gets three: `sweep.txt` (the table),
`summaries.txt` (every run's summary, one after the other) and `sweep.log` (each run's output); each run's own
folder is removed once read. On the CPU it runs as well (the slots then share the host's cores, not a device).
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.gpu_acceptance import effort_fields  # noqa: E402
from bench.recorded import jsonl_lines  # noqa: E402

COLUMNS = ("run", "slots", "attempts", "tasks", "round 1 s", "per GPU-hour", "graded again", "slot-s a grade",
           "expert/reference/task CUDA start s", "lock windows/draws/idle s", "device GiB max",
           "host's loop ms", "round 1 CPUs busy/stolen %", "statuses")
"""The table's columns, read from each run's summary (`read_summary`) and grades. "graded again": the tries the
grader failed (`infra_error`) that the acceptance graded again, as the pipeline's client does (its
grades_retried.jsonl). The attempts and the rate count verdicts only (an infra_error judges nothing): until the
acceptance graded them again (after H100 run 102), a try it failed counted, and the column then gave the rate without
them (H100 run 100's 8 slots on a full device ended 9 of 36 so, quickly). "host's loop ms": the host's fixed Python
loop as the run started, before its service (`bench/hostwatch.host_profile`), then, after a slash, the same loop with
the service starting beside it in the same process; "round 1 CPUs busy/stolen %" the host watch's medians over round 1,
the share the hypervisor gave to others apart. Until H100 run 153 only the second reading was made, and it was no
reading of the host: it went 72, 138, 76 and 140 ms by turns in H100 run 152's four runs on one machine (H200 run 147's
A runs 134-145 ms, its B runs 76-78)."""


KEPT_ROLES = ("expert", "reference", "task")
"""The kept workers whose CUDA starts the table gives (a task's one worker, `Slot.task`, with `+task_workers`)."""


def parse_runs(text: str, demo: int) -> list[tuple[int, int, tuple[str, ...], tuple | None]]:
    """`12,8x96,6+host_verify,6-task_workers,6@clip_reps=3,6:10/0.015,6:10/0.015/1` -> [(12, demo, (), None), (8, 96,
    (), None), (6, demo, ("host_verify",), None), (6, demo, ("-task_workers",), None), (6, demo, ("@clip_reps=3",),
    None), (6, demo, (), (10, 0.015)), (6, demo, (), (10, 0.015, 1))]: slots, demo attempts, the parts switched on
    (`+part`: the acceptance's `--with`) or off (`-part`, kept as "-part": its `--without`) and the `Effort` fields set
    (`@field=value`, kept so: its `--effort`), the timing effort (least pairs, half-width target, and warm-up pairs a
    size if given; None: the device's default); a clear error for anything else."""
    runs = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        m = re.fullmatch(r"(\d{1,3})(?:x(\d{1,4}))?((?:[+-][a-z_]+|@[a-z_]+=\d*\.?\d+)*)"
                         r"(?::(\d{1,3})/(0?\.\d+)(?:/(\d))?)?", item)
        if not m or int(m.group(1)) < 1 or (m.group(4) and int(m.group(4)) < 1):
            raise ValueError(f"--runs: {item!r} is not N[xD][+part...][-part...][@field=value...][:R/H[/W]] (N slots "
                             ">= 1, D demo attempts, parts for --with and --without, an `Effort` field's value for "
                             "--effort, R least timed pairs >= 1, H the half-width target and W warm-up pairs a size, "
                             "e.g. 6:10/0.015, 6:10/0.015/1 or 6@clip_reps=3)")
        runs.append((int(m.group(1)), int(m.group(2)) if m.group(2) else demo,
                     tuple(p.lstrip("+") for p in re.findall(r"[+-][a-z_]+|@[a-z_]+=[\d.]+", m.group(3))),
                     ((int(m.group(4)), float(m.group(5))) + ((int(m.group(6)),) if m.group(6) else ()))
                     if m.group(4) else None))
    if not runs:
        raise ValueError("--runs: no run given")
    return runs


def read_summary(text: str) -> dict:
    """The sweep's figures of one acceptance summary (`bench/gpu_acceptance.py`'s `summary.txt`); a figure the
    summary lacks (a run cut off before its table) is left out."""
    out: dict = {}
    m = re.search(r"service, round 1(?: cut off)? \((\d+) slots\)\t(\d+) in (\d+) s: (\d+) per GPU-hour", text)
    if m:
        out.update(slots=int(m.group(1)), attempts=int(m.group(2)), round1_s=int(m.group(3)), rate=int(m.group(4)),
                   cut_off="cut off" in m.group(0))
    m = re.search(r"round 1's tasks\t(\d+):", text)
    if m:
        out["tasks"] = int(m.group(1))
    m = re.search(r"a slot's time by part of the grade \((\d+) grades, ([\d.]+) slot-seconds in all\)", text)
    if m and int(m.group(1)):
        out["slot_s_per_grade"] = float(m.group(2)) / int(m.group(1))
    starts = {role: float(m.group(1)) / 1e3 for role in KEPT_ROLES
              if (m := re.search(rf"worker start, {role}: boot's cuda\t\d+\t[\d.]+\t([\d.]+)", text))}
    if starts:
        out["cuda_start_s"] = starts
    m = re.search(r"the device lock's time \(s\)\t([^\n;]+)", text)
    if m:
        parts = dict(p.rsplit(" ", 1) for p in m.group(1).split(", ") if " " in p)
        out["lock"] = {k: float(parts[k]) for k in ("window", "draws_held", "idle") if k in parts}
    m = re.search(r"round 1\tdevice memory used \(GiB\) median [\d.]+, p90 [\d.]+, max ([\d.]+)", text)
    if m:
        out["device_gib_max"] = float(m.group(1))
    m = re.search(r"a fixed Python loop ([\d.]+) ms", text)  # the host's speed as the run started
    if m:
        out["host_loop_ms"] = float(m.group(1))
    m = re.search(r"\(([\d.]+) ms with the service starting beside it\)", text)  # the same loop, the service up
    if m:
        out["host_loop_up_ms"] = float(m.group(1))
    m = re.search(r"round 1\t\d+ samples over [\d.]+ s; host CPUs busy \(of \d+\) median (\d+)%, p90 \d+%"
                  r"(?: \(stolen by the hypervisor median ([\d.]+)%)?", text)
    if m:
        out["cpu_busy_pct"] = int(m.group(1))
        if m.group(2) is not None:
            out["stolen_pct"] = float(m.group(2))
    return out


def row(name: str, figures: dict, statuses: dict, again: int = 0) -> list[str]:
    """One line of the table (`COLUMNS`); '-' where a figure is missing. `again`: the tries graded again."""
    def get(key, fmt="{}"):
        return fmt.format(figures[key]) if key in figures else "-"

    starts, lock = figures.get("cuda_start_s", {}), figures.get("lock", {})
    return [name, get("slots"), get("attempts"), get("tasks"),
            get("round1_s") + (" (cut off)" if figures.get("cut_off") else ""), get("rate"), str(again),
            get("slot_s_per_grade", "{:.2f}"),
            "/".join(f"{starts[r]:.2f}" if r in starts else "-" for r in KEPT_ROLES),
            "/".join(f"{lock[k]:.1f}" if k in lock else "-" for k in ("window", "draws_held", "idle")),
            get("device_gib_max", "{:.1f}"), get("host_loop_ms", "{:.1f}") + (
                f"/{figures['host_loop_up_ms']:.1f}" if "host_loop_up_ms" in figures else ""),
            f"{get('cpu_busy_pct')}/{get('stolen_pct', '{:.1f}')}",
            ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) or "-"]


def table(rows: list[list[str]]) -> str:
    return "\n".join("\t".join(r) for r in [list(COLUMNS), *rows])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--runs", default="12,6,8,12", help="slot counts (N) or slots x demo attempts (NxD), in order")
    ap.add_argument("--demo", type=int, default=48, help="demo attempts of a run given as N (default 48)")
    ap.add_argument("--cuda-l1", type=int, default=12, help="CUDA-L1 attempts in every run (the prepared sample)")
    ap.add_argument("--run-s", type=int, default=175, help="each run's wall-clock limit; its hard stop 25 s before")
    ap.add_argument("--device", default="auto")
    args, extra = ap.parse_known_args()
    extra = [a for a in extra if a != "--"]
    try:
        runs = parse_runs(args.runs, args.demo)
        for _, _, parts, _ in runs:  # a field the acceptance would refuse, refused before the first run starts
            effort_fields(",".join(p[1:] for p in parts if p.startswith("@")))
    except ValueError as e:
        ap.error(f"--runs: {e}" if not str(e).startswith("--runs") else str(e))
    if args.run_s < 60:
        ap.error("--run-s: at least 60 s (a service's start alone takes 20-30 s on a GPU)")
    args.out.mkdir(parents=True, exist_ok=True)
    rows, names = [], collections.Counter()
    with open(args.out / "sweep.log", "w") as log, open(args.out / "summaries.txt", "w") as summaries:
        for slots, demo, parts, effort in runs:
            name = (f"w{slots}" + (f"x{demo}" if demo != args.demo else "")
                    + "".join(p if p.startswith(("-", "@")) else f"+{p}" for p in parts)
                    + (f":{effort[0]}/{effort[1]:g}" + "".join(f"/{w}" for w in effort[2:]) if effort else ""))
            names[name] += 1
            name += f".{names[name]}" if names[name] > 1 else ""
            run_dir = args.out / name.replace("/", "-")  # `:10/0.015` names a run, not a folder in a folder
            cmd = [sys.executable, str(ROOT / "bench" / "gpu_acceptance.py"), "--out", str(run_dir),
                   "--workers", str(slots), "--groups", "cuda_l1,demo", "--cuda-l1", str(args.cuda_l1),
                   "--demo", str(demo), "--fresh-sample", "0", "--budget-s", str(args.run_s - 60),
                   "--hard-stop-s", str(args.run_s - 25), "--stall-s", "60", "--device", args.device, *extra]
            on = [p for p in parts if not p.startswith(("-", "@"))]
            off, fields = [p[1:] for p in parts if p.startswith("-")], [p[1:] for p in parts if p.startswith("@")]
            if on:
                cmd += ["--with", ",".join(on)]
            if off:
                cmd += ["--without", ",".join(off)]
            if fields:
                cmd += ["--effort", ",".join(fields)]
            if effort:
                cmd += ["--min-reps", str(effort[0]), "--target-halfwidth", str(effort[1]),
                        *(["--warmup-pairs", str(effort[2])] if len(effort) > 2 else [])]
            t0 = time.perf_counter()
            log.write(f"## {name}: {' '.join(cmd[1:])}\n")
            log.flush()
            try:
                rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.run_s, cwd=ROOT).returncode
            except subprocess.TimeoutExpired:
                rc = "killed at --run-s"
            log.write(f"## {name}: exit {rc} after {time.perf_counter() - t0:.0f} s\n")
            log.flush()
            summary = run_dir / "summary.txt"
            text = summary.read_text() if summary.exists() else ""
            summaries.write(f"######## {name} (exit {rc})\n{text}\n")
            summaries.flush()
            statuses = collections.Counter()
            grades = run_dir / "grades.jsonl"
            if grades.exists():
                for line in grades.read_text().splitlines():
                    if line.strip():
                        statuses[json.loads(line).get("status", "?")] += 1
            retried = run_dir / "grades_retried.jsonl"
            again = len(jsonl_lines(retried)) if retried.exists() else 0
            rows.append(row(name, read_summary(text), statuses, again))
            (args.out / "sweep.txt").write_text(table(rows) + "\n")  # after every run: a cut-off call keeps it
            shutil.rmtree(run_dir, ignore_errors=True)
            print(f"{name}: exit {rc}, " + ", ".join(f"{c} {v}" for c, v in zip(COLUMNS[4:7], rows[-1][4:7])),
                  flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
