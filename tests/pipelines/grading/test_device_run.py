"""A release graded elsewhere: the device run's records (pipelines.grading.device_run) and the resource that answers
from them (pipelines.grading.recorded).

The record tests are pure (hand-made GradeResults in a records folder). The end-to-end test is the real chain on
this CPU, as it runs across machines: `kerneltraj device-plan`; `bench/gpu_label_survival.py` in two calls, the
second on an empty state seeded from the first's records; `kerneltraj release --device-records` on the first
call's records (it stops at the recheck and names what it lacks) and on the second's; `kerneltraj status --json`.
It checks that every stored grade is the recorded one, not a regrade. The device run's calls are processes of their
own, as on the GPU machine; the `kerneltraj` commands run in this process (tests/conftest.py `run_cli`), since
the shared release's tests already run `kerneltraj release` in a process of its own.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.contract import GradeResult, Reason, SizeResult, Status
from pipelines.grading.client import GradeOutcome, GraderSpec, GradingIncomplete
from pipelines.grading.device_run import GRADES_FILE, SETTINGS_FILE, outcome_record, source_sha256
from pipelines.grading.recorded import RecordedGrader, RecordsMismatch
from pipelines.grading.replay import ReplayPlan, Setting, replay_seed
from tests.conftest import REPO_ROOT, checkpoint_pair, project_env, run_cli

SPEC = GraderSpec(profile="cpu", timeout_s=60)


def _result(attempt_id: str, task_id: str = "t1", seed: int = 7, status: Status = Status.CORRECT) -> GradeResult:
    correct = status is Status.CORRECT
    sizes = [SizeResult(size_key="n=1", hidden=False, cand_ms=1.0, expert_ms=2.0, cand_ms_ci=(0.9, 1.1),
                        expert_ms_ci=(1.9, 2.1), reps=20, speedup=2.0, max_rel_err=0.0)] if correct else []
    return GradeResult(attempt_id=attempt_id, task_id=task_id, task_revision="r", grader_version="v",
                       status=status, reason_code=Reason.OK if correct else Reason.EXCEPTION,
                       reason="all sizes within tolerance" if correct else "boom",
                       reward=1.0 if correct else -24.0, seed=seed, profile="cpu", device="cpu",
                       fingerprint_id="f", sizes=sizes, speedup_geomean=2.0 if correct else None,
                       phase_seconds={"total": 1.0})


def _write(folder: Path, name: str, rows: list[dict]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_recorded_grader_answers_each_request_from_its_record_and_refuses_what_does_not_match(tmp_path):
    rec = lambda aid, seed, src, seg, at: {**outcome_record("primary", GradeOutcome(_result(aid, seed=99), 2, 0.5),  # noqa: E731
                                                            source_sha256(src), seed), "segment": seg, "segment_s": at}
    _write(tmp_path, GRADES_FILE, [rec("a1", 11, "src-a1", "call1", 3.0), rec("a2", 12, "src-a2", "call1", 5.0),
                                   rec("a3", 13, "src-a3", "call2", 4.0)])
    grader = RecordedGrader(records=str(tmp_path))
    got = list(grader.grade([SPEC.request("a1", "t1", "src-a1", "pytorch", "run", 11),
                             SPEC.request("a2", "t1", "src-a2", "pytorch", "run", 12)]))
    # The recorded outcome, retries and all, not a fresh one; the result keeps the root seed the grader drew.
    assert [(o.result.attempt_id, o.tries, o.retry_s, o.result.seed) for o in got] == [("a1", 2, 0.5, 99),
                                                                                       ("a2", 2, 0.5, 99)]
    assert grader.recorded_wall_s("primary") == 5.0 + 4.0  # each call's segment ends at its last grade
    assert grader.recorded_wall_s("revalidation") is None
    with pytest.raises(RecordsMismatch, match="a1: the device run graded task t1"):
        list(grader.grade([SPEC.request("a1", "t1", "edited source", "pytorch", "run", 11)]))
    with pytest.raises(GradingIncomplete, match=r"1 of 2 requests were not graded in the device run .*\['a9'\]"):
        list(grader.grade([SPEC.request("a1", "t1", "src-a1", "pytorch", "run", 11),
                           SPEC.request("a9", "t1", "src", "pytorch", "run", 11)]))
    # Another seed is another pass's grade: never taken for this one.
    with pytest.raises(GradingIncomplete):
        list(grader.grade([SPEC.request("a1", "t1", "src-a1", "pytorch", "run", 12)]))


def test_a_folder_without_grades_is_refused_as_device_records_in_one_line(tmp_path):
    """The CLI and the resource share one check: the folder must be what a device run's --out wrote."""
    with pytest.raises(FileNotFoundError, match="--device-records takes the folder a device run wrote"):
        _ = RecordedGrader(records=str(tmp_path))._grades
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "--state-dir", str(tmp_path / "state"), "release",
                           "--device-records", str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**project_env(tmp_path, ()), "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 2 and proc.stderr.count("\n") <= 1, proc.stderr
    assert f"{tmp_path.resolve()} holds no grades.jsonl" in proc.stderr


def test_a_recorded_replay_must_be_the_sample_this_warehouse_draws(tmp_path):
    plan = ReplayPlan.for_device(True, pairs=1, settings=["isolated"])
    candidates = [{"attempt_id": a, "primary_total_s": 1.0} for a in ("a1", "a2", "a3")]
    from pipelines.grading.replay import sample_pairs

    (chosen,), _ = sample_pairs(candidates, plan)
    other = next(c["attempt_id"] for c in candidates if c["attempt_id"] != chosen["attempt_id"])

    def setting_line(aid: str) -> dict:
        g = outcome_record("replay", GradeOutcome(_result(f"{aid}#isolated#0", seed=replay_seed(aid, 0)), 1, 0.0), "",
                           None)
        row = {"run_id": "plan", "setting": "isolated", "device": "NVIDIA H200", "device_kind": "cuda",
               "started_at": "2026-12-02T08:34:50"}
        return {"plan": json.loads(json.dumps(dataclasses.asdict(plan))), "row": row,
                "grades": [{"grader_index": 0, "repeat": 0, **g}]}

    _write(tmp_path, GRADES_FILE, [])
    _write(tmp_path, SETTINGS_FILE, [setting_line(chosen["attempt_id"])])
    got_plan, pairs, rule, runs = RecordedGrader(records=str(tmp_path)).replay(candidates)
    assert got_plan == plan and [p["attempt_id"] for p in pairs] == [chosen["attempt_id"]]
    assert runs[0].row["started_at"].year == 2026 and runs[0].grades[0].outcome.result.status is Status.CORRECT
    _write(tmp_path, SETTINGS_FILE, [setting_line(other)])
    with pytest.raises(RecordsMismatch, match="not in this warehouse's sample"):
        RecordedGrader(records=str(tmp_path)).replay(candidates)
    assert plan.settings == (Setting.ISOLATED,)


@pytest.mark.slow
def test_a_release_takes_every_grade_from_a_device_runs_records(tmp_path, demo_files):
    """device-plan -> the device run in two calls -> release --device-records -> status."""
    attempts, malformed = demo_files
    wanted = {"demo.kestrel.log_softmax_rows_fp32.1.t1", "demo.wren.softmax_rows_fp32.1.t1",
              "demo.kestrel.cross_entropy_fp32.1.t1"}
    lines = [ln for ln in attempts.read_bytes().split(b"\n") if ln.strip() and json.loads(ln)["attempt_id"] in wanted]
    (tmp_path / "attempts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "malformed.jsonl").write_bytes(malformed.read_bytes().split(b"\n")[0] + b"\n")
    (tmp_path / "checkpoints").mkdir()
    checkpoint_pair(tmp_path / "checkpoints")
    env = project_env(tmp_path, (tmp_path / "attempts.jsonl", tmp_path / "malformed.jsonl"))
    env["KERNELTRAJ_CHECKPOINTS"] = ":".join(str(tmp_path / "checkpoints" / f) for f in ("baseline.jsonl",
                                                                                       "treatment.jsonl"))
    env["PYTHONPATH"] = str(REPO_ROOT)

    def run(*cmd: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    def kerneltraj(*args: str) -> subprocess.CompletedProcess:
        proc = run_cli(env, *args, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    kerneltraj("device-plan", "--out", "plan")
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["counts"] == {"primary": 3, "revalidation": 3, "checkpoint": 2} and plan["rows_refused_at_ingest"] == 1
    # One slot: each grading pass's service starts a zygote per slot (3 CPU-seconds each, four passes), and a second
    # slot grades these few attempts no sooner on two busy cores; records, resumes and releases are the same.
    device = [sys.executable, str(REPO_ROOT / "bench" / "gpu_label_survival.py"), "--plan", "plan", "--workers",
              "1", "--pairs", "1", "--settings", "isolated", "--max-primary-total-s", "0"]
    run(*device, "--state", "state1", "--out", "out1", "--phases", "primary")
    # The next call is on another machine: its state is empty, seeded from the records that came back.
    log = run(*device, "--state", "state2", "--resume-from", "out1", "--out", "out2").stdout
    assert "primary: 0 to grade (3 of 3 recorded or skipped)" in log  # resumed, not graded again
    records = tmp_path / "out2"
    assert len((records / "environments.jsonl").read_text().splitlines()) == 2  # each call's device, kept
    grades = [json.loads(ln) for ln in (records / GRADES_FILE).read_text().splitlines()]
    assert sorted(g["pass"] for g in grades).count("primary") == 3

    # The first call's records hold no recheck: the release stops there and says which grades it lacks.
    part = run_cli(env, "release", "--device-records", "out1", cwd=tmp_path)
    assert part.returncode == 1
    assert ("FAILED revalidated_records: pipelines.grading.client.GradingIncomplete: 3 of 3 requests were not "
            "graded in the device run") in part.stderr, part.stderr[-3000:]
    out = kerneltraj("release", "--device-records", str(records)).stderr
    assert "written to" in out and "FAILED" not in out
    import duckdb

    con = duckdb.connect(str(tmp_path / "state" / "warehouse.duckdb"), read_only=True)
    stored = {(a, p): json.loads(s) for a, p, s in con.execute(
        "SELECT attempt_id, grading_pass, CAST(sizes AS VARCHAR) FROM graded_attempts").fetchall()}
    replayed = con.execute("SELECT count(*), min(device) FROM contention_replay").fetchall()[0]
    con.close()
    graded = [g for g in grades if g["pass"] != "checkpoint"]  # checkpoint grades live in checkpoint_grades
    for g in graded:  # per-size timings are never equal across two grades: these are the recorded ones
        mine = [s["cand_ms"] for s in stored[(g["result"]["attempt_id"], g["pass"])]]
        assert mine == [s["cand_ms"] for s in g["result"]["sizes"]], g["result"]["attempt_id"]
    assert len(stored) == len(graded) and any(s for s in stored.values())
    assert replayed == (1, "cpu")
    status = json.loads(kerneltraj("status", "--json").stdout)
    settings = status["revalidation"]["contention"]["settings"]
    assert [(s["setting"], s["device"]) for s in settings] == [("isolated", "cpu")]
    recheck = status["revalidation"]["recheck"]
    assert recheck["units"] == 3 and recheck["throughput"]["device_hour_unit"] == "CPU device-hours"
    assert recheck["devices"] == ["cpu"]
    text = kerneltraj("status").stdout  # the device is named, as in the JSON
    assert "3 rechecked on cpu:" in text
    # Records per hour are the device's: its wall time for the recheck, not this release's reading of records.
    device_wall = RecordedGrader(records=str(records)).recorded_wall_s("revalidation")
    assert recheck["throughput"]["wall_s"] == pytest.approx(device_wall) and device_wall > 0
