"""A grading pass over the warehouse: every attempt without a current grade for the pass is graded, results are
committed in small batches (a killed run keeps what it graded, and the next run resumes), progress is logged
in lines the CLI turns into a bar; and the rule a stored reward must obey."""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
import time
from collections import Counter
from typing import Any, Callable, ContextManager, Protocol

import duckdb

from grader.contract import GRADER_VERSION, SizeResult, Status, reward
from pipelines.core.warehouse import insert_rows, load_sql, query_dicts, run_script, transaction
from pipelines.grading.backend import GradeOutcome, GradingBackend


class Connects(Protocol):
    """The warehouse as a pass uses it (the Warehouse resource)."""

    def connect(self, read_only: bool = False) -> ContextManager[duckdb.DuckDBPyConnection]: ...


PASS_PRIMARY = "primary"
PASS_REVALIDATION = "revalidation"
COMMIT_EVERY = 8
"""Results per transaction: small enough that a crash loses little, large enough to keep commits cheap."""
COMMIT_EVERY_S = 15.0
"""Also commit when this many seconds passed since the last commit (slow attempts)."""
PROGRESS_EVERY_S = 2.0
_PROGRESS = re.compile(r"^grading progress \[(?P<grading_pass>\w+)\]: (?P<done>\d+)/(?P<total>\d+) attempts")


def pass_seed(attempt_id: str, grading_pass: str) -> int:
    """The request seed of one pass over one attempt (`GradeRequest.seed`): a label, reproducible and
    different for each pass. It never decides an input: the grader draws its own root seed per grade
    and derives each call's from it (`grader.inputs.derive_seed`)."""
    digest = hashlib.sha256(f"kerneltraj/{grading_pass}/{attempt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


def progress_message(grading_pass: str, done: int, total: int) -> str:
    return f"grading progress [{grading_pass}]: {done}/{total} attempts"


def parse_progress(message: str) -> tuple[str, int, int] | None:
    """(pass, done, total) from a progress log line; the CLI turns these into a progress bar."""
    m = _PROGRESS.match(message or "")
    return (m["grading_pass"], int(m["done"]), int(m["total"])) if m else None


def public_sizes(sizes: list[SizeResult]) -> list[dict[str, Any]]:
    """Per-size results with hidden size keys replaced by `hidden#<n>`: hidden shapes stay sealed."""
    out, n_hidden = [], 0
    for s in sizes:
        d = dataclasses.asdict(s)
        if s.hidden:
            n_hidden += 1
            d["size_key"] = f"hidden#{n_hidden}"
        out.append(d)
    return out


def grade_row(o: GradeOutcome, grading_pass: str, source_sha256: str, run_id: str, now: dt.datetime) -> dict:
    r = o.result
    ph = {k: float(v) for k, v in r.phase_seconds.items()}
    return {
        "attempt_id": r.attempt_id, "grading_pass": grading_pass, "task_id": r.task_id,
        "task_revision": r.task_revision, "grader_version": r.grader_version, "source_sha256": source_sha256,
        "fingerprint_id": r.fingerprint_id, "status": r.status.value, "reason_code": r.reason_code.value,
        "reason": r.reason, "reward": r.reward, "speedup_geomean": r.speedup_geomean,
        "measured_speedup_geomean": r.measured_speedup_geomean,
        "sizes": json.dumps(public_sizes(r.sizes)), "tolerances": json.dumps(r.tolerances),
        "phase_seconds": json.dumps(ph), **{f"{k}_s": ph.get(k) for k in
                                          ("startup", "compile", "correctness", "timing", "expert", "total")},
        "retry_s": o.retry_s, "tries": o.tries, "seed": r.seed, "profile": r.profile, "device": r.device,
        "sharing": r.sharing, "sandbox": json.dumps(r.sandbox, default=str),
        "kernels_launched": json.dumps(r.kernels_launched), "run_id": run_id, "graded_at": now,
    }


def commit_grades(warehouse: Connects, rows: list[dict], fingerprints: dict[str, dict], run_id: str) -> None:
    """Replace these attempts' grades of their pass, version and revision, and store new fingerprints, in one
    transaction."""
    with warehouse.connect() as con, transaction(con):
        for row in rows:
            con.execute(load_sql("grading.delete_grade"), [row["attempt_id"], row["grading_pass"],
                                                           row["grader_version"], row["task_revision"]])
        insert_rows(con, "graded_attempts", rows)
        for fid, fp in fingerprints.items():
            con.execute(load_sql("grading.insert_fingerprint"), [fid, json.dumps(fp, sort_keys=True, default=str),
                                                                 run_id, fid])


def grade_pending(backend: GradingBackend, warehouse: Connects, grading_pass: str, run_id: str,
                  log: Callable[[str], None]) -> dict[str, Any]:
    """Grade every attempt that lacks a current grade for `grading_pass`; returns a summary. Progress goes to
    `log` as lines `parse_progress` reads back."""
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "grading.set_version", {"grader_version": GRADER_VERSION})
        pending = query_dicts(con, load_sql(f"grading.pending_{grading_pass}"),
                              {"grader_version": GRADER_VERSION})
        already = query_dicts(con, load_sql("grading.current_count"), {"grading_pass": grading_pass})[0]["n"]
    # The warehouse is closed while grading: the grader's workers never inherit its file handle.
    by_id = {p["attempt_id"]: p for p in pending}
    requests = [backend.request(p["attempt_id"], p["task_id"], p["source"], p["language"], p["entry_point"] or "run",
                                pass_seed(p["attempt_id"], grading_pass)) for p in pending]
    total = len(requests)
    log(f"{grading_pass}: {total} attempts to grade, {already} already graded under "
                     f"grader {GRADER_VERSION} (resumed, not re-graded)")
    log(progress_message(grading_pass, 0, total))
    rows: list[dict] = []
    fps: dict[str, dict] = {}
    statuses: Counter[str] = Counter()
    done, last_commit, last_log, started = 0, time.monotonic(), 0.0, time.monotonic()
    try:
        for outcome in (backend.grade(requests) if requests else ()):
            r = outcome.result
            want = by_id[r.attempt_id]
            if r.task_revision != want["task_revision"] or r.grader_version != GRADER_VERSION:
                raise RuntimeError(
                    f"{r.attempt_id}: graded as task revision {r.task_revision} by grader {r.grader_version}, but "
                    f"the warehouse expects {want['task_revision']} / {GRADER_VERSION}; re-run raw_attempts after "
                    f"a catalogue or grader change")
            now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
            rows.append(grade_row(outcome, grading_pass, want["source_sha256"], run_id, now))
            fps.setdefault(r.fingerprint_id, r.fingerprint)
            statuses[r.status.value] += 1
            done += 1
            if len(rows) >= COMMIT_EVERY or time.monotonic() - last_commit > COMMIT_EVERY_S:
                commit_grades(warehouse, rows, fps, run_id)
                rows, fps, last_commit = [], {}, time.monotonic()
            if done == total or time.monotonic() - last_log > PROGRESS_EVERY_S:
                log(progress_message(grading_pass, done, total))
                last_log = time.monotonic()
    finally:
        # Grades already received are kept even when the pass fails later (lost results, a bad revision).
        if rows:
            commit_grades(warehouse, rows, fps, run_id)
    elapsed = time.monotonic() - started
    recorded = backend.recorded_wall_s(grading_pass)
    elapsed = elapsed if recorded is None else recorded  # graded elsewhere: that machine's wall time
    return {"graded_now": done, "resumed": int(already), "by_status_now": dict(statuses), "elapsed_s": elapsed}


def reward_problems(grades: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored grades whose reward is not the contract's reward function of their status and per-size speedups."""
    bad = []
    for g in grades:
        speedups = [s["speedup"] for s in json.loads(g["sizes"] or "[]") if s.get("speedup") is not None]
        try:
            expected = reward(Status(g["status"]), speedups)
        except ValueError as e:
            bad.append({"attempt_id": g["attempt_id"], "status": g["status"], "reward": g["reward"],
                        "problem": str(e)})
            continue
        if abs(expected - g["reward"]) > 1e-9:
            bad.append({"attempt_id": g["attempt_id"], "status": g["status"], "reward": g["reward"],
                        "problem": f"expected {expected:.6g}"})
    return bad
