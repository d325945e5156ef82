"""A device run: the grading passes of a release made on a GPU machine without Dagster, and their records.

The label-survival part of a release (primary grade, isolated recheck, contention replay, and the learning
comparison's checkpoint grades) needs the GPU; Dagster, DuckDB and the Hub client stay here. So:

1. here, `kerneltraj device-plan --out DIR` writes a *plan*: every grade request the release will make (each
   attempt's id, task, source, language, entry point and the pass's seed), the task-card files and the grader
   settings;
2. there, `python3 bench/gpu_label_survival.py --plan DIR --state S --out OUT` grades the plan with this
   module (torch, triton and the standard library only) and appends every grade and every replay setting to
   OUT the moment it arrives; a run cut short resumes from S;
3. here, `kerneltraj release --device-records OUT` runs the release with `RecordedGrader`
   (`pipelines.grading.recorded`): each grading step asks for the same requests and is answered from the
   records instead of a local grader. The steps themselves (rows, labels, agreement, checks) are the same code
   as any other release; nothing is graded twice, nothing here is graded on the CPU.

Records (in OUT and S alike):
- `grades.jsonl`: one line per grade, `{"pass", "seed", "source_sha256", "tries", "retry_s", "result",
  "segment", "segment_s"}` with `result` the grader's GradeResult as JSON and `segment_s` the seconds since
  this call began the pass (a pass's wall time is the sum over its segments of their last grade's);
- `settings.jsonl`: one line per contention setting, `{"plan", "row", "grades"}` (run_setting's output);
- `progress.log`: what ran, when; `environments.jsonl`: each call's device and versions.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import platform
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from grader.contract import GRADER_VERSION, GradeRequest, GradeResult, Status
from pipelines.grading.client import GradeOutcome, GraderSpec, grade_with_retries, service_grade

PLAN_FILE, REQUESTS_FILE, CARDS_DIR = "plan.json", "requests.jsonl", "cards"
GRADES_FILE, SETTINGS_FILE, LOG_FILE, ENV_FILE = "grades.jsonl", "settings.jsonl", "progress.log", "environments.jsonl"
RECORD_FILES = (GRADES_FILE, SETTINGS_FILE, LOG_FILE, ENV_FILE)
"""What a device run records; a records folder that came back can seed the state of a later call."""
PASSES = ("primary", "revalidation", "replay", "checkpoint")
"""Phases of a device run, in the order they run: the replay samples the primary grades, the recheck follows
the primary, and the learning comparison's checkpoints (not part of label survival) come last."""
NO_RECHECK = {Status.INFRA_ERROR.value, Status.UNSUPPORTED_ON_BACKEND.value}
"""Primary statuses the recheck skips (`grading.pending_revalidation` skips them alike)."""


def records_folder(path: str | Path) -> Path:
    """A device run's records folder (the one `bench/gpu_label_survival.py --out` wrote), or an error saying what
    --device-records takes."""
    folder = Path(path).resolve()
    if not (folder / GRADES_FILE).is_file():
        raise FileNotFoundError(f"{folder} holds no {GRADES_FILE}: --device-records takes the folder a device run "
                                f"wrote (bench/gpu_label_survival.py --out)")
    return folder


def source_sha256(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass(frozen=True)
class PlannedGrade:
    """One grade a release will ask for."""

    grading_pass: str
    """`primary`, `revalidation` or `checkpoint`."""
    attempt_id: str
    task_id: str
    source: str
    language: str
    entry_point: str
    seed: int

    def request(self, spec: GraderSpec) -> GradeRequest:
        return spec.request(self.attempt_id, self.task_id, self.source, self.language, self.entry_point, self.seed)


def write_plan(out: Path, grades: Iterable[PlannedGrade], card_files: Iterable[Path], spec: GraderSpec,
               note: dict[str, Any]) -> dict[str, Any]:
    """The plan folder: plan.json, requests.jsonl and the card files (copied, so the folder travels alone)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / CARDS_DIR).mkdir(exist_ok=True)
    cards = []
    for i, f in enumerate(card_files):
        name = f"{i:02d}-{Path(f).name}"
        (out / CARDS_DIR / name).write_bytes(Path(f).read_bytes())
        cards.append(f"{CARDS_DIR}/{name}")
    counts: dict[str, int] = {}
    with open(out / REQUESTS_FILE, "w") as fh:
        for g in grades:
            fh.write(json.dumps(dataclasses.asdict(g)) + "\n")
            counts[g.grading_pass] = counts.get(g.grading_pass, 0) + 1
    plan = {"grader_version": GRADER_VERSION, "created_at": _now(), "cards": cards, "counts": counts,
            "spec": {**dataclasses.asdict(spec), "task_files": []}, **note}
    (out / PLAN_FILE).write_text(json.dumps(plan, indent=1, sort_keys=True) + "\n")
    return plan


def read_plan(plan_dir: Path) -> tuple[dict[str, Any], list[PlannedGrade]]:
    plan = json.loads((plan_dir / PLAN_FILE).read_text())
    if plan["grader_version"] != GRADER_VERSION:
        raise SystemExit(f"{plan_dir}: the plan was written for grader {plan['grader_version']}, this is "
                         f"{GRADER_VERSION}; write it again with `kerneltraj device-plan`")
    grades = [PlannedGrade(**json.loads(ln)) for ln in (plan_dir / REQUESTS_FILE).read_text().splitlines() if ln]
    return plan, grades


class Records:
    """Appends each record to the state folder (a resumed run reads it) and to the output folder (what comes
    back even when the run is cut off), flushed line by line."""

    def __init__(self, state: Path, out: Path, resume_from: Path | None = None):
        self.dirs = [state, out] if state.resolve() != out.resolve() else [state]
        for d in self.dirs:
            d.mkdir(parents=True, exist_ok=True)
        for name in RECORD_FILES if resume_from else ():  # records that came back seed an empty state
            if (resume_from / name).exists() and not (state / name).exists():
                (state / name).write_bytes((resume_from / name).read_bytes())
        if len(self.dirs) == 2:  # what earlier calls recorded comes back with this one's
            for name in RECORD_FILES:
                if (state / name).exists():
                    (out / name).write_bytes((state / name).read_bytes())
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def append(self, name: str, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, sort_keys=True, default=str) + "\n"
        with self._lock:
            for d in self.dirs:
                with open(d / name, "a") as f:
                    f.write(line)

    def log(self, message: str) -> None:
        line = f"{_now()} +{time.monotonic() - self.started:6.1f}s {message}"
        print(line, flush=True)
        with self._lock:
            for d in self.dirs:
                with open(d / LOG_FILE, "a") as f:
                    f.write(line + "\n")


def outcome_record(grading_pass: str, o: GradeOutcome, source_sha: str, seed: int | None) -> dict[str, Any]:
    """A grade as recorded; `seed` is the request's (a result carries the root seed the grader drew)."""
    return {"pass": grading_pass, "seed": seed, "source_sha256": source_sha, "tries": o.tries,
            "retry_s": o.retry_s, "result": json.loads(o.result.to_json())}


def outcome_of(rec: dict[str, Any]) -> GradeOutcome:
    return GradeOutcome(GradeResult.from_json(json.dumps(rec["result"])), int(rec["tries"]), float(rec["retry_s"]))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a record file (a line cut by a killed run is left out: it was never a record)."""
    if not path.exists():
        return []
    out = []
    for ln in path.read_text().splitlines():
        try:
            out.append(json.loads(ln))
        except json.JSONDecodeError:
            continue
    return out


@dataclass
class DeviceRun:
    """One device run over a plan; `run` does the phases that are not done yet, in order, until `stop_at`."""

    plan_dir: Path
    records: Records
    workers: int
    """Grader slots on this machine (the plan's other grader settings hold)."""
    compile_cache: str
    """This machine's folder of shared extension builds."""
    stop_at: float
    """time.monotonic() past which no new phase or replay setting starts (a pass already started runs on, until
    it ends or the hard stop); the run then ends and can be resumed."""
    replay_overrides: dict[str, Any]
    """ReplayPlan fields to change from the device's defaults (pairs, graders, settings, ...)."""
    phases: tuple[str, ...] = PASSES

    def __post_init__(self) -> None:
        self.plan, self.planned = read_plan(self.plan_dir)
        cards = tuple(str(self.plan_dir / c) for c in self.plan["cards"])
        # The plan's grader settings, with this machine's slots and build folder and the plan's own card files.
        self.spec = GraderSpec(**{**self.plan["spec"], "workers": self.workers, "compile_cache": self.compile_cache,
                                  "task_files": cards})
        self.done = {(r["pass"], r["result"]["attempt_id"]): r for r in read_jsonl(self.records.dirs[0] / GRADES_FILE)}

    def left(self) -> float:
        return self.stop_at - time.monotonic()

    def run(self) -> bool:
        """Every phase done (True), or stopped by the clock (False)."""
        for phase in self.phases:
            if self.left() <= 0:
                self.records.log(f"stop: no time left before {phase}")
                return False
            if not (self._replay() if phase == "replay" else self._grade_pass(phase)):
                return False
        self.records.log("device run complete")
        return True

    def todo(self, grading_pass: str) -> list[PlannedGrade]:
        wanted = [g for g in self.planned if g.grading_pass == grading_pass
                  and (grading_pass, g.attempt_id) not in self.done]
        if grading_pass == "revalidation":  # only what the primary pass judged, as the warehouse asks
            primary = {a: r["result"]["status"] for (p, a), r in self.done.items() if p == "primary"}
            wanted = [g for g in wanted if primary.get(g.attempt_id) not in (None, *NO_RECHECK)]
        return wanted

    def _grade_pass(self, grading_pass: str) -> bool:
        todo = self.todo(grading_pass)
        total = sum(1 for g in self.planned if g.grading_pass == grading_pass)
        self.records.log(f"{grading_pass}: {len(todo)} to grade ({total - len(todo)} of {total} recorded or skipped)")
        if not todo:
            return True
        by_id = {g.attempt_id: g for g in todo}
        n, counts, t0 = 0, {}, time.monotonic()
        segment = f"{_now()}/{grading_pass}"  # this call's share of the pass: its wall time is the last grade's
        outcomes = grade_with_retries(self.spec.retries, lambda b: service_grade(self.spec, b),
                                      [g.request(self.spec) for g in todo])
        for o in outcomes:
            g = by_id[o.result.attempt_id]
            rec = {**outcome_record(grading_pass, o, source_sha256(g.source), g.seed), "segment": segment,
                   "segment_s": round(time.monotonic() - t0, 3)}
            self.records.append(GRADES_FILE, rec)
            self.done[(grading_pass, g.attempt_id)] = rec
            n += 1
            counts[o.result.status.value] = counts.get(o.result.status.value, 0) + 1
            if n % 10 == 0 or n == len(todo):
                self.records.log(f"{grading_pass}: {n}/{len(todo)} {counts}")
        return True

    def _replay(self) -> bool:
        from pipelines.grading.replay import (ReplayPlan, process_graders, read_nvml, run_setting,
                                              sample_pairs)

        primary = [(a, r) for (p, a), r in self.done.items() if p == "primary"]
        by_id = {g.attempt_id: g for g in self.planned if g.grading_pass == "primary"}
        candidates = [{"attempt_id": a, "task_id": by_id[a].task_id, "source": by_id[a].source,
                       "language": by_id[a].language, "entry_point": by_id[a].entry_point,
                       "primary_total_s": (r["result"]["phase_seconds"] or {}).get("total")}
                      for a, r in sorted(primary) if r["result"]["status"] == Status.CORRECT.value]
        recorded = {r["row"]["setting"] for r in read_jsonl(self.records.dirs[0] / SETTINGS_FILE)}
        with process_graders(self.spec, 1) as (grader,):
            cuda = grader.device.startswith("cuda")
            plan = ReplayPlan.for_device(cuda, **self.replay_overrides)
            pairs, rule = sample_pairs(candidates, plan)
            self.records.log(f"replay on {grader.device_name}: {len(pairs)} pairs of {len(candidates)} correct "
                             f"({rule}); settings {[s.value for s in plan.settings]}; done before: {sorted(recorded)}")
            for setting in plan.settings if pairs else ():
                if setting.value in recorded:
                    continue
                if self.left() <= 0:
                    self.records.log(f"stop: no time left before replay setting {setting.value}")
                    return False
                run = run_setting(setting, plan, grader, pairs, lambda: read_nvml(cuda), self.plan_dir.name, rule,
                                  self.records.log)
                self.records.append(SETTINGS_FILE, {
                    "plan": dataclasses.asdict(plan),
                    "row": run.row, "grades": [{"grader_index": g.grader_index, "repeat": g.repeat,
                                                **outcome_record("replay", g.outcome, "", None)} for g in run.grades]})
                self.records.log(f"replay [{setting.value}]: {run.row['grades_recorded']}/"
                                 f"{run.row['grades_requested']} grades in {run.row['wall_s']:.0f} s, verdict "
                                 f"{run.row['verdict']} {run.row['flags']}, error {run.row['error']}")
        return True


def environment() -> dict[str, Any]:
    """The device and the versions this run graded with."""
    from grader import fingerprint

    env: dict[str, Any] = {"python": platform.python_version(), "grader_version": GRADER_VERSION,
                           "started_at": _now(), "argv": sys.argv}
    for mod in ("torch", "triton"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception as e:  # noqa: BLE001 - a missing module is recorded, not fatal here
            env[mod] = f"unavailable: {e}"
    try:
        import torch

        cuda = torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        cuda = False
    env["device"] = fingerprint.read_local(cuda)
    return env


def hard_stop(at_s: float, records: Records, leave: Callable[[int], None]) -> threading.Thread:
    """A watchdog: at `at_s` seconds it kills every process this run started (grader processes and co-tenants
    have sessions of their own: they would outlive it, and sit on the device at the next call) and ends the
    process at once, so the device call returns before its limit with every record written so far."""
    def watch() -> None:
        from pipelines.grading.replay import descendants

        time.sleep(at_s)
        records.log(f"hard stop at {at_s:.0f} s: ending now; run again to resume")
        for pid in descendants({os.getpid()}):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        leave(3)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
