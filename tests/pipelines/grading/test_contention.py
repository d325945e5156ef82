"""Revalidation labels, per-task agreement, NVML contradiction flags, report figures and real co-tenants.

Labels and agreement are pure (pipelines.grading.agreement); the SQL rebuild of revalidated_records is run
on a real DuckDB warehouse and checked against the Python recomputation; NVML readings are replayed
from recorded dumps (tests/fixtures/contention_nvml_*.json, edited from the H200 recording); the
report is built from a small hand-made set of contention tables; one test starts the real co-tenant
processes on the CPU and checks they ran and are gone.
"""
from __future__ import annotations

import datetime as dt
import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

from pipelines.grading.agreement import record_problems
from grader.contract import GradeResult, Reason, SizeResult, Status
from grader.fingerprint import Replay, collect
from grader.labels import TIE_BAND_LOG2
from grader.labels import speed_label as grader_speed_label
from pipelines.grading.agreement import (Agreement, GradeLabel, Label, compare, consensus, grade_label, quantile,
                                         summarise, unit_verdicts)
from pipelines.grading.replay import (PRICE_TABLE, Flag, ReplayPlan, Setting, Verdict, check_reading,
                                      nothing_to_replay_on_cpu, price_usd_per_hour, replay_attempt_id, replay_seed,
                                      run_setting, sample_pairs)
from pipelines.reporting.revalidation_report import (revalidation_status, build_report, dataset_card_section,
                                                     report_markdown, report_png, reward_bands, status_figures)
from pipelines.grading.cotenants import CoTenant, LoadDriver, Role
from pipelines.grading.backend import GradingBackend
from pipelines.reporting.status_sections import StatusContext
from pipelines.core.warehouse import connect, insert_rows, load_sql, query_dicts, run_script, transaction
from tests.conftest import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures"
GRADER = 4200
"""Pid of our own grader process in the edited NVML recordings."""
HOG = 4101
"""Pid of the compute hog in them."""


def sizes(*speedups: float, rel: float = 0.01) -> str:
    """Per-size timings with a symmetric relative CI of +-rel on both medians."""
    return json.dumps([{"size_key": f"n={i}", "hidden": False, "cand_ms": 1.0, "expert_ms": s,
                        "cand_ms_ci": [1.0 - rel, 1.0 + rel], "expert_ms_ci": [s * (1 - rel), s * (1 + rel)],
                        "reps": 20, "speedup": s, "max_rel_err": 0.1} for i, s in enumerate(speedups)])


def reward_of(*speedups: float) -> float:
    return sum(math.log2(s) for s in speedups) / len(speedups)


def lab(*speedups: float, rel: float = 0.01) -> GradeLabel:
    return grade_label("correct", reward_of(*speedups), sizes(*speedups, rel=rel))


# ---- labels --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("speedups,rel,want", [
    ((2.0, 2.0), 0.01, Label.FASTER),
    ((1.0, 1.0), 0.005, Label.TIE),
    ((0.5,), 0.01, Label.SLOWER),
    ((2 ** 0.06,), 0.05, Label.AMBIGUOUS),      # centre above the band, interval across its edge
    ((2 ** -0.2,), 0.3, Label.AMBIGUOUS),       # wide interval from slower into the tie band
    ((2 ** 0.2,), 0.01, Label.FASTER),          # the same centre with a tight interval is definite
])
def test_interval_labels(speedups, rel, want):
    g = lab(*speedups, rel=rel)
    assert g.label is want
    assert g.log2_lo <= reward_of(*speedups) <= g.log2_hi
    # The rule is grader.labels' own: the same sizes in a GradeResult get the same label.
    result = GradeResult(attempt_id="a", task_id="t", task_revision="r", grader_version="v", status=Status.CORRECT,
                         reason_code=Reason.OK, reason="ok", reward=reward_of(*speedups), seed=1, profile="cpu",
                         device="cpu", fingerprint_id="f",
                         sizes=[SizeResult(**{k: (tuple(v) if k.endswith("_ci") else v) for k, v in d.items()})
                                for d in json.loads(sizes(*speedups, rel=rel))])
    assert grader_speed_label(result) == want.value


def test_floored_failed_and_untimed_grades():
    assert grade_label("wrong_output", -24.0, "[]").label is Label.FLOORED
    assert grade_label("infra_error", -24.0, "[]").label is Label.FAILED
    assert grade_label(None, None, None).label is Label.FAILED
    # A correct grade without a timed size has no interval: ambiguous, never a guess.
    untimed = json.dumps([{"size_key": "n", "hidden": False, "cand_ms": None, "expert_ms": None, "speedup": None}])
    assert grade_label("correct", 0.0, untimed).label is Label.AMBIGUOUS


def test_compare_counts_false_fast_and_keeps_ambiguous_apart():
    fast, tie, slow, amb = lab(2.0), lab(1.0, rel=0.005), lab(0.5), lab(2 ** 0.06, rel=0.05)
    floored = grade_label("wrong_output", -24.0, "[]")
    assert compare(fast, lab(2.1)).agreement is Agreement.AGREE and compare(fast, lab(2.1)).revalidated
    for second in (tie, slow, floored):
        v = compare(fast, second)
        assert v.false_fast and not v.revalidated and v.agreement is Agreement.DISAGREE
    v = compare(fast, amb)
    assert v.agreement is Agreement.AMBIGUOUS and v.fast_unconfirmed and not v.false_fast and not v.revalidated
    assert not compare(slow, fast).false_fast  # slower first, faster on recheck: a disagreement, not a false fast
    assert compare(fast, grade_label("infra_error", -24.0, "[]")).agreement is Agreement.MISSING
    assert compare(floored, grade_label("cheat_flagged", -24.0, "[]")).agreement is Agreement.DISAGREE
    assert compare(fast, lab(1.0, rel=0.005)).delta_log2 == pytest.approx(1.0)
    assert compare(fast, floored).delta_log2 is None


def test_repeated_timings_count_once_and_agreement_is_averaged_per_task():
    fast = lab(2.0)
    # Task A: three candidates, one timed three times; all agree. Task B: one candidate that disagrees.
    first = [("a1", "A", fast), ("a1", "A", lab(2.05)), ("a1", "A", lab(1.95)), ("a2", "A", fast),
             ("a3", "A", fast), ("b1", "B", fast)]
    second = [("a1", "A", fast), ("a2", "A", fast), ("a3", "A", fast), ("b1", "B", lab(0.5))]
    s = summarise(unit_verdicts(first, second))
    assert (s.units, s.tasks, s.timings) == (4, 2, 6)
    assert s.agree == 3 and s.agree_rate == pytest.approx(0.75)
    assert s.agree_rate_by_task == pytest.approx(0.5)  # (1.0 + 0.0) / 2: task A's three candidates weigh once
    assert (s.false_fast, s.first_fast, s.false_fast_rate) == (1, 4, pytest.approx(0.25))
    assert ("faster", "faster", 3) in s.matrix and ("slower", "faster", 1) in s.matrix


def test_repeats_that_disagree_make_the_unit_ambiguous_not_a_vote():
    c = consensus([lab(2.0), lab(2.0), lab(0.5)])
    assert c.label is Label.AMBIGUOUS and c.reward == pytest.approx(1.0)  # median reward, label not voted
    assert consensus([lab(2.0), grade_label("infra_error", -24, "[]")]).label is Label.FASTER
    assert consensus([grade_label("infra_error", -24, "[]")]).label is Label.FAILED
    s = summarise(unit_verdicts([("u", "T", lab(2.0)), ("u", "T", lab(0.5))], [("u", "T", lab(2.0))]))
    assert (s.ambiguous, s.agree, s.ambiguous_share) == (1, 0, 1.0)
    assert s.missing == 0
    s = summarise(unit_verdicts([("u", "T", lab(2.0))], [("v", "T", lab(2.0))]))
    assert s.missing == 2 and s.agree_rate is None


def test_quantile_matches_numpy():
    xs = [0.3, -1.2, 4.0, 0.0, 2.5, -0.7, 1.1]
    for q in (0.1, 0.5, 0.9, 0.0, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))


# ---- the revalidated_records rebuild (SQL) against the Python recomputation ----------------------------

def _grade(attempt_id: str, grading_pass: str, status: str, speedups=(), rel=0.01, seed=1) -> dict:
    correct = status == "correct"
    return {"attempt_id": attempt_id, "grading_pass": grading_pass, "task_id": attempt_id.split(".")[0],
            "task_revision": "r1", "grader_version": "0.3.0", "source_sha256": "s", "fingerprint_id": "fp",
            "status": status, "reason_code": "ok" if correct else "mismatch", "reason": status,
            "reward": reward_of(*speedups) if correct else -24.0,
            "sizes": sizes(*speedups, rel=rel) if correct else "[]",
            "seed": seed, "device": "cpu", "sharing": "isolated", "run_id": "run-1", "total_s": 1.0}


CASES = {  # attempt: (primary, recheck, expected agreement, false fast, fast unconfirmed)
    "t1.agree": (("correct", (2.0,)), ("correct", (2.1,)), "agree", False, False),
    "t1.false_fast": (("correct", (2.0,)), ("correct", (0.5,)), "disagree", True, False),
    "t2.unconfirmed": (("correct", (2.0,)), ("correct", (2 ** 0.06,), 0.05), "ambiguous", False, True),
    "t2.to_floor": (("correct", (2.0,)), ("wrong_output",), "disagree", True, False),
    "t3.floored": (("wrong_output",), ("wrong_output",), "agree", False, False),
    "t3.infra": (("correct", (2.0,)), ("infra_error",), "missing", False, False),
}


@pytest.fixture()
def warehouse(tmp_path):
    path = tmp_path / "w.duckdb"
    with connect(path) as con, transaction(con):
        con.execute("INSERT INTO warehouse_meta VALUES ('grader_version', '0.3.0')")
        grades, raws = [], []
        for aid, (p, v, *_) in CASES.items():
            raws.append({"attempt_id": aid, "task_id": aid.split(".")[0], "trajectory_id": aid, "turn": 1,
                         "source": "x", "source_sha256": "s", "origin": f"f:{len(raws)}", "language": "triton",
                         "entry_point": "run"})
            grades.append(_grade(aid, "primary", p[0], *p[1:], seed=1))
            grades.append(_grade(aid, "revalidation", v[0], *v[1:], seed=2))
        insert_rows(con, "raw_attempts", raws)
        insert_rows(con, "tasks", [{"task_id": t, "task_revision": "r1"} for t in ("t1", "t2", "t3")])
        insert_rows(con, "graded_attempts", grades)
        run_script(con, "revalidation.rebuild", {"tie_band": TIE_BAND_LOG2, "run_id": "run-1"})
        run_script(con, "revalidation.record_run", {"run_id": "run-1", "started_at": dt.datetime(2026, 1, 1),
                                                    "wall_s": 36.0, "graded_now": len(CASES), "resumed": 0,
                                                    "devices": 1})
    return path


def test_rebuild_labels_with_intervals_and_matches_python(warehouse):
    with connect(warehouse) as con:
        rows = {r["attempt_id"]: r for r in query_dicts(con, load_sql("revalidation.records"))}
    assert set(rows) == set(CASES)
    for aid, (_, _, agreement, false_fast, unconfirmed) in CASES.items():
        r = rows[aid]
        assert record_problems(r) == [], aid
        assert (r["agreement"], r["false_speedup_label"], r["fast_unconfirmed"]) == (agreement, false_fast,
                                                                                     unconfirmed), aid
        assert r["revalidated"] == (agreement == "agree")
    assert rows["t2.unconfirmed"]["revalidation_label"] == "ambiguous" and rows["t2.unconfirmed"]["ambiguous_near_tie"]
    assert rows["t3.floored"]["primary_label"] is None  # not correct: the status says why
    # The check notices a tampered row.
    assert "revalidated" in record_problems({**rows["t1.false_fast"], "revalidated": True})


# ---- NVML contradiction flags from replayed readings ---------------------------------------------------

def reading(name: str) -> dict:
    return collect(Replay(json.loads((FIXTURES / f"{name}.json").read_text())))


@pytest.mark.parametrize("fixture,setting,cotenants,flags,verdict", [
    ("nvml_h200", Setting.ISOLATED, set(), (), Verdict.VERIFIED),
    ("contention_nvml_isolated_foreign", Setting.ISOLATED, set(), (Flag.FOREIGN_PROCESSES,), Verdict.CONTRADICTED),
    ("contention_nvml_hog_present", Setting.COMPUTE_HOG, {HOG}, (), Verdict.VERIFIED),
    ("contention_nvml_hog_present", Setting.ISOLATED, set(), (Flag.FOREIGN_PROCESSES,), Verdict.CONTRADICTED),
    ("contention_nvml_isolated_foreign", Setting.COMPUTE_HOG, {HOG},
     (Flag.FOREIGN_PROCESSES, Flag.COTENANT_NOT_SEEN), Verdict.CONTRADICTED),
    ("nvml_h200", Setting.MEMBW_HOG, {HOG}, (Flag.COTENANT_NOT_SEEN,), Verdict.CONTRADICTED),
    ("contention_nvml_mig", Setting.COMPUTE_HOG, {HOG}, (Flag.MIG_ENABLED,), Verdict.DIFFERENT_TARGET),
    ("contention_nvml_exclusive", Setting.TIME_SLICED, set(), (Flag.EXCLUSIVE_COMPUTE_MODE,), Verdict.CONTRADICTED),
    ("contention_nvml_exclusive", Setting.ISOLATED, set(), (), Verdict.VERIFIED),
    ("contention_nvml_host_pids", Setting.COMPUTE_HOG, {HOG}, (Flag.PIDS_UNMATCHED,), Verdict.UNVERIFIABLE),
])
def test_declared_setting_against_replayed_nvml(fixture, setting, cotenants, flags, verdict):
    r = reading(fixture)
    assert r["kind"] == "cuda" and r["gpu_name"] == "NVIDIA H200"
    check = check_reading(setting, r, {GRADER}, cotenants)
    assert (check.flags, check.verdict) == (flags, verdict)
    assert check.processes_listed == len(r["other_processes"])


def test_unverifiable_without_nvml_and_dead_cotenants_contradict():
    cpu = collect(None)
    assert check_reading(Setting.COMPUTE_HOG, cpu, set(), {HOG}).verdict is Verdict.UNVERIFIABLE
    assert check_reading(Setting.ISOLATED, {"kind": "cuda", "nvml_error": "no lib"}, set(), set()).flags == (
        Flag.NVML_UNAVAILABLE,)
    dead = check_reading(Setting.COMPUTE_HOG, cpu, set(), {HOG}, cotenants_alive=False)
    assert dead.flags == (Flag.CPU_NO_NVML, Flag.COTENANT_DIED) and dead.verdict is Verdict.CONTRADICTED
    assert check_reading(Setting.COMPUTE_HOG, reading("contention_nvml_hog_present"), {GRADER}, {HOG},
                         cotenants_alive=False).verdict is Verdict.CONTRADICTED


# ---- plan, sample, prices -------------------------------------------------------------------------------

def test_cpu_plan_is_small_and_sample_is_declared_and_deterministic():
    plan = ReplayPlan.for_device(False)
    assert plan.pairs <= 6 and plan.graders <= 2 and plan.settings[0] is Setting.ISOLATED
    assert set(plan.settings) == set(Setting)
    only = ReplayPlan.for_device(False, settings=["compute_hog"], pairs=2, max_primary_total_s=0)
    assert only.settings == (Setting.ISOLATED, Setting.COMPUTE_HOG) and only.max_primary_total_s is None
    cands = [{"attempt_id": f"a{i}", "primary_total_s": 0.25 * i} for i in range(20)]  # 7 under the 1.5 s cap
    picked, rule = sample_pairs(cands, plan)
    again, _ = sample_pairs(list(reversed(cands)), plan)
    assert [p["attempt_id"] for p in picked] == [p["attempt_id"] for p in again]
    assert len(picked) == plan.pairs and all(p["primary_total_s"] <= plan.max_primary_total_s for p in picked)
    assert "sha256" in rule and str(plan.max_primary_total_s) in rule
    assert len(sample_pairs(cands, only)[0]) == 2 and len(sample_pairs(cands[:1], plan)[0]) == 1
    assert replay_seed("a1", 0) == replay_seed("a1", 0) != replay_seed("a1", 1)


def test_no_grader_starts_for_a_cpu_replay_that_draws_no_pair(monkeypatch):
    """On the CPU, candidates all over the plan's cap leave nothing to replay: the rule is returned and no grader
    process is started for it; a pair within the cap, a cap lifted by the run config, or a GPU start one."""
    import grader.service

    slow = [{"attempt_id": f"a{i}", "primary_total_s": 2.0 + i} for i in range(3)]
    monkeypatch.setattr(grader.service, "pick_device", lambda device="auto": "cpu")
    assert nothing_to_replay_on_cpu(slow) == sample_pairs(slow, ReplayPlan.for_device(False))[1]
    assert nothing_to_replay_on_cpu([*slow, {"attempt_id": "b", "primary_total_s": 1.0}]) is None
    assert nothing_to_replay_on_cpu(slow, max_primary_total_s=0) is None
    monkeypatch.setattr(grader.service, "pick_device", lambda device="auto": "cuda")
    assert nothing_to_replay_on_cpu(slow) is None


def test_price_table_unknowns_stay_unknown():
    assert price_usd_per_hour("cpu") is None and price_usd_per_hour("Some GPU") is None
    assert price_usd_per_hour(None) is None
    assert price_usd_per_hour("NVIDIA H200") == PRICE_TABLE["NVIDIA H200"].usd_per_hour > 0


class _HalfGrader(GradingBackend):
    """The real resource's retry logic over a grader that never answers a pair's second repeat."""

    @property
    def pid(self) -> int:
        return os.getpid()

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def device_name(self) -> str:
        return "cpu"

    def _service_grade(self, batch):
        for r in batch:
            if r.attempt_id.endswith("#1"):
                continue
            yield GradeResult(attempt_id=r.attempt_id, task_id=r.task_id, task_revision="r", grader_version="v",
                              status=Status.RUNTIME_ERROR, reason_code=Reason.EXCEPTION, reason="boom",
                              reward=-24.0, seed=r.seed, profile="cpu", device="cpu", fingerprint_id="f",
                              sharing=r.sharing)


def test_a_graders_workers_are_its_descendants():
    """The NVML check counts a grader's workers as ours (they hold the CUDA contexts): every level below it."""
    import subprocess

    from pipelines.grading.replay import descendants

    outer = subprocess.Popen(["sh", "-c", "sh -c 'sleep 30 & wait' & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(found := descendants({outer.pid})) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(found) == 2 and outer.pid not in found  # the inner shell and its sleep, not the root
        assert found <= descendants({os.getpid()})
    finally:
        for pid in descendants({outer.pid}):
            os.kill(pid, 9)
        outer.kill()
        outer.wait()


def test_lost_grades_are_counted_missing_and_the_setting_is_recorded():
    plan = ReplayPlan.for_device(False, repeats=2)
    pairs = [{"attempt_id": "t1.a", "task_id": "t1", "source": "x", "language": "triton", "entry_point": "run"}]
    run = run_setting(Setting.ISOLATED, plan, _HalfGrader(retries=1), pairs, lambda: collect(None), "run-3", "rule")
    row = run.row
    assert (row["grades_requested"], row["grades_recorded"], row["missing"]) == (2, 1, 1)
    assert "GradingIncomplete" in row["error"] and row["verdict"] == "unverifiable"
    assert [g.outcome.result.sharing for g in run.grades] == ["isolated"]
    assert replay_attempt_id(run.grades[0].outcome.result.attempt_id) == "t1.a"


# ---- report figures from hand-built contention tables ---------------------------------------------------

SERVICE_COLUMNS = tuple(f"{w}_{c}" for w in ("alone", "service") for c in ("requests", "errors", "p50_ms", "p99_ms"))


def _setting_row(setting: str, device: str, kind: str, wall_s: float, requested: int, recorded: int, **kw) -> dict:
    # insert_rows takes its columns from the first row: every row names every column.
    kw = {**dict.fromkeys(SERVICE_COLUMNS), **kw}
    return {"run_id": "run-2", "setting": setting, "graders": kw.pop("graders", 1), "repeats": 1, "device": device,
            "device_kind": kind, "pairs": requested, "grades_requested": requested, "grades_recorded": recorded,
            "missing": requested - recorded, "wall_s": wall_s, "sample_rule": "hand-built",
            "price_usd_per_hour": price_usd_per_hour(device), "cotenants": "[]", "cotenants_gone": True,
            "flags": json.dumps(kw.pop("flags", [])), "verdict": kw.pop("verdict", "verified"),
            "started_at": dt.datetime(2026, 1, 1, 0, 0, kw.pop("second", 0)), **kw}


def _replay_row(setting: str, aid: str, status: str, speedups=(), device="cpu", repeat=0, rel=0.01) -> dict:
    g = grade_label(status, reward_of(*speedups) if status == "correct" else -24.0,
                    sizes(*speedups, rel=rel) if status == "correct" else "[]")
    p = lab(2.0)  # every sampled pair was faster in its primary grade
    return {"run_id": "run-2", "setting": setting, "grader_index": 0, "repeat": repeat, "attempt_id": aid,
            "task_id": aid.split(".")[0], "status": status, "reward": g.reward, "label": g.label.value,
            "log2_lo": g.log2_lo, "log2_hi": g.log2_hi, "primary_status": "correct", "primary_reward": p.reward,
            "primary_label": p.label.value, "primary_log2_lo": p.log2_lo, "primary_log2_hi": p.log2_hi,
            "device": device, "sizes": sizes(*speedups, rel=rel) if status == "correct" else "[]"}


def _build_tables(path: Path, device: str, kind: str) -> None:
    with connect(path) as con, transaction(con):
        run_script(con, "contention.create")
        insert_rows(con, "contention_settings", [
            _setting_row("isolated", device, kind, 36.0, 3, 3, second=0),
            _setting_row("compute_hog", device, kind, 72.0, 3, 3, second=1),
            _setting_row("latency_service", device, kind, 36.0, 3, 2, second=2, alone_requests=100, alone_errors=0,
                         alone_p50_ms=1.0, alone_p99_ms=2.0, service_requests=200, service_errors=10,
                         service_p50_ms=3.0, service_p99_ms=9.0, flags=["cotenant_not_seen"],
                         verdict="contradicted")])
        insert_rows(con, "contention_replay", [
            _replay_row("isolated", "t1.a", "correct", (2.0,), device),
            _replay_row("isolated", "t1.b", "correct", (2.0,), device),
            _replay_row("isolated", "t2.c", "correct", (2.0,), device),
            # compute hog: t1.a timed twice (one unit), t1.b falls into the tie band, t2.c ambiguous
            _replay_row("compute_hog", "t1.a", "correct", (2.2,), device),
            _replay_row("compute_hog", "t1.a", "correct", (2.4,), device, repeat=1),
            _replay_row("compute_hog", "t1.b", "correct", (1.0,), device, rel=0.005),
            _replay_row("compute_hog", "t2.c", "correct", (2 ** 0.06,), device, rel=0.05),
            _replay_row("latency_service", "t1.a", "correct", (2.0,), device),
            _replay_row("latency_service", "t1.b", "infra_error", (), device)])


def test_report_figures_from_hand_built_tables(warehouse):
    _build_tables(warehouse, "cpu", "cpu")
    with connect(warehouse, read_only=True) as con:
        rep = build_report(con)
        card = dataset_card_section(con)
    by = {f.setting: f for f in rep.settings}
    assert list(by) == ["isolated", "compute_hog", "latency_service"]
    iso, hog, svc = by["isolated"], by["compute_hog"], by["latency_service"]
    assert iso.reference == "primary grade" and hog.reference == "isolated replay"
    assert (iso.labels.agree, iso.labels.agree_rate) == (3, 1.0)
    h = hog.labels
    assert (h.units, h.timings, h.agree, h.disagree, h.ambiguous) == (3, 4, 1, 1, 1)
    assert h.agree_rate == pytest.approx(1 / 3) and h.ambiguous_share == pytest.approx(1 / 3)
    assert h.agree_rate_by_task == pytest.approx(0.25)  # t1: 1 of 2 agree, t2: its only unit ambiguous -> 0
    assert (h.false_fast, h.first_fast, h.false_fast_rate) == (0, 1, 0.0)  # only t1.a is faster under the hog
    # Δlog2 over the units correct on both sides: t1.a median(2.2, 2.4) vs 2.0, t1.b 1.0 vs 2.0, t2.c 2^0.06 vs 2.0
    deltas = [math.log2(math.sqrt(2.2 * 2.4)) - 1, -1.0, 0.06 - 1.0]
    assert h.delta_log2_median == pytest.approx(float(np.quantile(deltas, 0.5)))
    assert h.delta_log2_p10 == pytest.approx(float(np.quantile(deltas, 0.1)))
    assert ("faster", "tie", 1) in h.matrix and ("faster", "ambiguous", 1) in h.matrix
    # throughput: units agreeing with the primary grade per hour; CPU device-hours; no price for the CPU
    assert hog.throughput.revalidated == 1 and hog.throughput.per_wall_hour == pytest.approx(50.0)
    assert hog.throughput.device_hour_unit == "CPU device-hours"
    assert hog.throughput.price_usd_per_hour is None and hog.throughput.per_usd is None
    assert (svc.missing, svc.failures, svc.coverage) == (1, 1, pytest.approx(2 / 3))
    assert svc.service["error_rate"] == pytest.approx(0.05) and svc.service["p99_ms"] == 9.0
    assert svc.verdict == "contradicted" and svc.flags == ("cotenant_not_seen",)
    # the recheck: 6 records, 2 agree (t1.agree, t3.floored), 2 false fast of 5 first-fast
    assert rep.recheck.units == 6 and rep.recheck.agree == 2 and rep.recheck.false_fast == 2
    assert rep.recheck_throughput.per_wall_hour == pytest.approx(2 / 0.01)
    assert rep.recheck_devices == ("cpu",) and status_figures(rep)["recheck"]["devices"] == ["cpu"]
    # by band of the primary reward: the three units correct in both all start at reward 1 (2x the expert)
    slow, near, fast = rep.recheck_bands
    assert (slow.units, near.units, fast.units) == (0, 0, 3) and slow.abs_delta_median is None
    moved = sorted(abs(1.0 - reward_of(x)) for x in (2.1, 0.5, 2 ** 0.06))
    assert fast.abs_delta_median == pytest.approx(moved[1]) and fast.abs_delta_max == pytest.approx(moved[2])
    md = report_markdown(rep)
    assert "independent recheck, graded on cpu" in md
    assert "CPU figures, not GPU figures" in md and "unknown" in md and "CPU device-hours" in md
    assert card.startswith("## Revalidation and contention")
    assert report_png(rep)[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(status_figures(rep))  # the status section is plain JSON


def test_priced_device_gets_dollar_figures(tmp_path):
    path = tmp_path / "gpu.duckdb"
    _build_tables(path, "NVIDIA H200", "cuda")
    with connect(path, read_only=True) as con:
        rep = build_report(con)
    hog = {f.setting: f for f in rep.settings}["compute_hog"].throughput
    price = PRICE_TABLE["NVIDIA H200"].usd_per_hour
    assert hog.device_hour_unit == "GPU-hours"
    assert hog.per_usd == pytest.approx(1 / (72 / 3600 * price))
    assert rep.recheck is None  # no revalidated_records in this warehouse


def test_a_recheck_graded_on_a_gpu_is_labelled_with_it(warehouse):
    """A release loaded from a device run's records: the recheck names the GPU, its hours are GPU-hours and
    the declared price applies; a recheck across two devices gets no single price and says both."""
    with connect(warehouse) as con:
        con.execute("UPDATE graded_attempts SET device = 'NVIDIA H200'")
    with connect(warehouse, read_only=True) as con:
        rep = build_report(con)
    tp = rep.recheck_throughput
    assert rep.recheck_devices == ("NVIDIA H200",) and tp.device == "NVIDIA H200"
    assert tp.device_hour_unit == "GPU-hours" and tp.price_usd_per_hour == PRICE_TABLE["NVIDIA H200"].usd_per_hour
    assert "graded on NVIDIA H200" in report_markdown(rep)
    with connect(warehouse) as con:
        con.execute("UPDATE graded_attempts SET device = 'cpu' WHERE attempt_id = 't1.agree'")
    with connect(warehouse, read_only=True) as con:
        rep = build_report(con)
    assert rep.recheck_devices == ("NVIDIA H200", "cpu")
    assert rep.recheck_throughput.device is None and rep.recheck_throughput.price_usd_per_hour is None
    assert rep.recheck_throughput.device_hour_unit == "device-hours (CPU and GPU mixed)"


def test_reward_bands_split_by_the_primary_reward_and_leave_out_both_at_the_clip():
    pairs = [(-6.0, -6.0),  # both at the lower clip: 0 by construction, left out
             (-6.0, -5.0), (-3.0, -2.0), (-1.5, -1.2),  # over 2x slower than the expert
             (-1.0, -0.9), (0.5, 0.5),  # within 2x (-1 belongs here)
             (1.0, 2.0)]  # over 2x faster (1 belongs here)
    slow, near, fast = reward_bands(pairs)
    assert (slow.units, near.units, fast.units) == (3, 2, 1)
    assert slow.abs_delta_median == pytest.approx(1.0) and slow.abs_delta_max == pytest.approx(1.0)
    assert slow.abs_delta_p90 == pytest.approx(1.0)
    assert near.abs_delta_median == pytest.approx(0.05) and near.abs_delta_max == pytest.approx(0.1)
    assert (fast.abs_delta_median, fast.abs_delta_max) == (1.0, 1.0)
    assert [b.units for b in reward_bands([])] == [0, 0, 0]


def test_status_section_absent_until_there_is_something(tmp_path):
    path = tmp_path / "empty.duckdb"
    with connect(path):
        pass
    with connect(path, read_only=True) as con:
        assert revalidation_status(StatusContext(con, None, None)) is None
    _build_tables(path, "cpu", "cpu")
    with connect(path, read_only=True) as con:
        out = revalidation_status(StatusContext(con, None, None))
    assert out["recheck"] is None and [s["setting"] for s in out["contention"]["settings"]] == [
        "isolated", "compute_hog", "latency_service"]


# ---- real co-tenant processes on the CPU ----------------------------------------------------------------

@pytest.mark.slow
def test_real_cotenants_run_and_are_stopped():
    started = time.monotonic()
    with CoTenant(Role.COMPUTE_HOG, "cpu") as hog, CoTenant(Role.MEMBW_HOG, "cpu") as bw, \
            CoTenant(Role.LATENCY_SERVICE, "cpu") as svc:
        pids = [hog.pid, bw.pid, svc.pid]
        assert all(os.getpgid(p) == p for p in pids)  # each leads its own group: the stop reaches all of it
        driver = LoadDriver(svc.ready["port"], rate_hz=40)
        stats = driver.window(0.75).finish()
    reports = [hog.report, bw.report, svc.report]
    assert [r.role for r in reports] == ["compute_hog", "membw_hog", "latency_service"]
    for r in reports:
        assert r.alive_during and r.gone and r.exit_code == 0 and r.iterations > 0, r
        with pytest.raises(ProcessLookupError):
            os.killpg(r.pid, 0)
    assert stats.requests > 5 and stats.errors == 0 and 0 < stats.p50_ms <= stats.p99_ms
    assert svc.report.iterations >= stats.requests  # the service counted every request the driver sent
    assert time.monotonic() - started < 120
