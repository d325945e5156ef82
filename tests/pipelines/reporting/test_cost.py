"""Cost accounting on a real DuckDB warehouse with hand-inserted attempts, grades, recheck and replay rows.

The accounting asset and its checks run through Dagster; every expected number below is worked out by hand
from the rows inserted here (comments show the sums), not read back from the code under test.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import dagster as dg
import pytest

from assets.accounting import CHECKS, accounting
from grader.labels import TIE_BAND_LOG2
from pipelines.reporting import cost
from pipelines.defs.resources import Warehouse
from pipelines.cli.status import SECTIONS
from pipelines.reporting.status_sections import StatusContext
from pipelines.core.warehouse import connect, insert_rows, query_dicts, run_script, transaction

GV = "gv-test"
T0 = dt.datetime(2026, 1, 1, 12, 0, 0)
"""The ingest time of every raw attempt (naive UTC, like the pipeline's)."""
RECHECK_RUN = "run-recheck"
REPLAY_RUN = "run-replay"


def _sizes(cand_ms: float = 1.0, expert_ms: float = 2.0) -> str:
    """One timed size, clearly faster (log2 speedup 1 with a 1% interval): both grades label it `faster`."""
    return json.dumps([{"size_key": "N=1", "hidden": False, "cand_ms": cand_ms, "expert_ms": expert_ms,
                        "cand_ms_ci": [cand_ms * 0.99, cand_ms * 1.01],
                        "expert_ms_ci": [expert_ms * 0.99, expert_ms * 1.01], "reps": 20,
                        "speedup": expert_ms / cand_ms, "max_rel_err": 0.1}])


def _grade(attempt_id: str, grading_pass: str, status: str, phases: dict[str, float], *, retry_s: float = 0.0,
           tries: int = 1, graded_at: dt.datetime, run_id: str = "run-primary", grader_version: str = GV) -> dict:
    correct = status == "correct"
    return {"attempt_id": attempt_id, "grading_pass": grading_pass, "task_id": "t1", "task_revision": "r1",
            "grader_version": grader_version, "source_sha256": f"sha-{attempt_id}", "fingerprint_id": "fp1",
            "status": status, "reason_code": "ok" if correct else status, "reason": "",
            "reward": 1.0 if correct else -24.0, "speedup_geomean": 2.0 if correct else None,
            "measured_speedup_geomean": 2.0 if correct else None, "sizes": _sizes() if correct else "[]",
            "tolerances": "{}", "phase_seconds": json.dumps(phases),
            **{f"{k}_s": phases.get(k) for k in ("startup", "compile", "correctness", "timing", "expert", "total")},
            "retry_s": retry_s, "tries": tries, "seed": hash((attempt_id, grading_pass)) & 0xFFFF,
            "profile": "cpu", "device": "cpu", "sharing": "isolated", "sandbox": "{}", "kernels_launched": "[]",
            "run_id": run_id, "graded_at": graded_at}


def _phases(startup: float, compile_: float, correctness: float, timing: float, expert: float, total: float,
            reference: float = 0.0, transfer: float = 0.0, teardown: float = 0.0) -> dict[str, float]:
    return {"startup": startup, "compile": compile_, "correctness": correctness, "timing": timing,
            "expert": expert, "reference": reference, "transfer": transfer, "teardown": teardown, "total": total}


def _raw(attempt_id: str) -> dict:
    return {"attempt_id": attempt_id, "task_id": "t1", "agent": "a", "model": "m", "trajectory_id": "tr1",
            "turn": 1, "language": "triton", "entry_point": "run", "source": "x", "source_sha256": f"sha-{attempt_id}",
            "origin": f"in.jsonl:{attempt_id}", "run_id": "run-ingest", "ingested_at": T0}


def _sec(seconds: float) -> dt.timedelta:
    return dt.timedelta(seconds=seconds)


def build_warehouse(path: Path, *, extra_raw: tuple[str, ...] = (), duplicate: str | None = None) -> None:
    """Five ledger records (the cases of the module docstring), an orphaned grade, a superseded grade, one
    recheck run and two contention settings."""
    with connect(path) as con, transaction(con):
        insert_rows(con, "warehouse_meta", [{"key": "grader_version", "value": GV}])
        insert_rows(con, "tasks", [{"task_id": "t1", "task_revision": "r1", "family": "f", "lineage": "l"}])
        ids = ("a_ok", "a_retry", "a_crash", "a_infra", *extra_raw)
        insert_rows(con, "raw_attempts", [_raw(a) for a in ids] + ([_raw(duplicate)] if duplicate else []))
        # A duplicate line quarantined under an admitted attempt's id: it must not be charged that attempt's grades.
        insert_rows(con, "quarantine", [{"origin": "in.jsonl:6", "attempt_id": "a_ok", "reason_code": "duplicate_id",
                                         "reason": "duplicate", "run_id": "run-ingest", "ingested_at": T0}])
        insert_rows(con, "input_files", [{"path": "in.jsonl", "sha256": "s", "accepted": len(ids), "quarantined": 1,
                                          "nonblank_lines": len(ids) + 1, "run_id": "run-ingest", "ingested_at": T0}])
        insert_rows(con, "graded_attempts", [
            # Correct, revalidated within this run: accepted at the recheck, 20 s after admission.
            _grade("a_ok", "primary", "correct", _phases(0.1, 0.2, 0.3, 0.4, 0.15, 1.25, 0.05, 0.01, 0.02),
                   graded_at=T0 + _sec(10)),
            _grade("a_ok", "revalidation", "correct", _phases(0.1, 0.2, 0.4, 0.5, 0.2, 1.5),
                   graded_at=T0 + _sec(20), run_id=RECHECK_RUN),
            # Its grade under an older grader version: history, superseded, still this record's cost.
            _grade("a_ok", "primary", "correct", _phases(0.1, 0.1, 0.2, 0.2, 0.1, 0.7),
                   graded_at=T0 - _sec(500), grader_version="gv-old", run_id="run-old"),
            # A retry in each pass; graded in an earlier run than the latest ingest (resumed): no latency.
            _grade("a_retry", "primary", "correct", _phases(0.1, 0.2, 0.2, 0.3, 0.1, 1.0), retry_s=3.0, tries=2,
                   graded_at=T0 - _sec(100)),
            _grade("a_retry", "revalidation", "correct", _phases(0.1, 0.2, 0.3, 0.4, 0.1, 1.2), retry_s=0.5,
                   tries=2, graded_at=T0 - _sec(50), run_id=RECHECK_RUN),
            # Crashed in both grades: floored twice, the floor is confirmed (revalidated), its seconds are failures.
            _grade("a_crash", "primary", "crashed", _phases(0.1, 0.3, 0.0, 0.0, 0.0, 0.8), graded_at=T0 + _sec(5)),
            _grade("a_crash", "revalidation", "crashed", _phases(0.1, 0.2, 0.0, 0.0, 0.0, 0.6),
                   graded_at=T0 + _sec(30), run_id=RECHECK_RUN),
            # The grader could not judge it even after a retry: terminal infra_error, no recheck owed.
            _grade("a_infra", "primary", "infra_error", _phases(0.5, 0.0, 0.0, 0.0, 0.0, 0.5), retry_s=2.0, tries=2,
                   graded_at=T0 + _sec(7)),
            # An attempt no longer in raw_attempts: its seconds belong to no record.
            _grade("gone", "primary", "correct", _phases(0.1, 0.1, 0.1, 0.05, 0.05, 0.4), retry_s=0.1,
                   graded_at=T0 - _sec(900)),
        ])
        run_script(con, "revalidation.rebuild", {"tie_band": TIE_BAND_LOG2, "run_id": RECHECK_RUN})
        # The recheck run's wall: 10 s, of which its grades hold 1.5 + (1.2 + 0.5) + 0.6 = 3.8 s.
        run_script(con, "revalidation.record_run", {"run_id": RECHECK_RUN, "started_at": T0, "wall_s": 10.0,
                                                    "graded_now": 3, "resumed": 0, "devices": 1})
        run_script(con, "contention.create")
        insert_rows(con, "contention_settings", [
            {"run_id": REPLAY_RUN, "setting": "isolated", "graders": 1, "wall_s": 3.0, "started_at": T0},
            {"run_id": REPLAY_RUN, "setting": "compute_hog", "graders": 2, "wall_s": 2.0, "started_at": T0}])
        insert_rows(con, "contention_replay", [
            {"run_id": REPLAY_RUN, "setting": "isolated", "attempt_id": "a_ok", "task_id": "t1", "status": "correct",
             "total_s": 1.1, "retry_s": 0.0},
            {"run_id": REPLAY_RUN, "setting": "compute_hog", "attempt_id": "a_ok", "task_id": "t1",
             "status": "correct", "total_s": 0.9, "retry_s": 0.2}])


def materialize(path: Path) -> dg.ExecuteInProcessResult:
    """The accounting asset and all its checks; a failed blocking check fails the run (asserted by callers)."""
    return dg.materialize([accounting, *CHECKS], resources={"warehouse": Warehouse(path=str(path))},
                          raise_on_error=False)


def _checks(res: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in res.get_asset_check_evaluations()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dg.ExecuteInProcessResult]:
    path = tmp_path_factory.mktemp("cost") / "w.duckdb"
    build_warehouse(path)
    res = materialize(path)
    assert res.success
    return path, res


def test_each_record_is_charged_its_own_seconds(built) -> None:
    path, _ = built
    with connect(path, read_only=True) as con:
        rows = {(r["ledger_source"], r["record_key"]): r for r in query_dicts(con, "SELECT * FROM record_costs")}
    assert set(rows) == {("raw", "a_ok"), ("raw", "a_retry"), ("raw", "a_crash"), ("raw", "a_infra"),
                         ("quarantine", "in.jsonl:6")}
    ok, retry, crash, infra, quar = (rows[k] for k in sorted(rows, key=lambda k: ["a_ok", "a_retry", "a_crash",
                                                                                  "a_infra", "in.jsonl:6"]
                                                              .index(k[1])))
    assert [r["terminal_state"] for r in (ok, retry, crash, infra, quar)] == [
        "revalidated", "revalidated", "revalidated", "infra_error", "quarantined"]
    # a_ok: primary 1.25 + recheck 1.5 + replays (1.1) + (0.9 + 0.2) + superseded 0.7 = 5.65
    assert (ok["startup_s"], ok["compile_s"], ok["correctness_s"], ok["timing_s"], ok["expert_s"]) == pytest.approx(
        (0.1, 0.2, 0.3, 0.4, 0.15))
    assert (ok["reference_s"], ok["transfer_s"], ok["teardown_s"]) == pytest.approx((0.05, 0.01, 0.02))
    assert ok["primary_s"] == pytest.approx(1.25) and ok["revalidation_s"] == pytest.approx(1.5)
    assert ok["replay_s"] == pytest.approx(2.2) and ok["replay_grades"] == 2
    assert ok["superseded_s"] == pytest.approx(0.7) and ok["superseded_grades"] == 1
    assert ok["grader_s"] == pytest.approx(5.65) and ok["failed_s"] == 0
    # a_retry: 1.0 + 3.0 thrown away, recheck 1.2 + 0.5 thrown away = 5.7
    assert (retry["retry_s"], retry["retries"], retry["revalidation_retry_s"], retry["revalidation_retries"]) == \
        pytest.approx((3.0, 1, 0.5, 1))
    assert retry["grader_s"] == pytest.approx(5.7)
    # a_crash: 0.8 + 0.6, the primary 0.8 counted as failure seconds (inside primary_s, not added again)
    assert crash["grader_s"] == pytest.approx(1.4) and crash["failed_s"] == pytest.approx(0.8)
    # a_infra: 0.5 + 2.0 thrown away, no recheck
    assert infra["grader_s"] == pytest.approx(2.5) and infra["revalidation_s"] == 0
    assert infra["failed_s"] == pytest.approx(0.5)
    # The quarantined duplicate carries nothing although its attempt_id is a_ok's.
    assert quar["attempt_id"] == "a_ok" and quar["grader_s"] == 0 and quar["primary_s"] == 0
    assert all(r["full_cost"] for r in rows.values())


def test_time_from_submission_to_acceptance(built) -> None:
    path, _ = built
    with connect(path, read_only=True) as con:
        rows = {r["record_key"]: r for r in query_dicts(con, "SELECT * FROM record_costs")}
    assert rows["a_ok"]["submit_to_accept_s"] == pytest.approx(20.0)  # the recheck 20 s after admission
    assert rows["a_crash"]["submit_to_accept_s"] == pytest.approx(30.0)
    assert rows["a_retry"]["accepted_at"] is not None and rows["a_retry"]["submit_to_accept_s"] is None  # resumed
    assert rows["a_infra"]["accepted_at"] is None and rows["a_infra"]["submit_to_accept_s"] is None
    assert rows["in.jsonl:6"]["submitted_at"] is None and rows["in.jsonl:6"]["submit_to_accept_s"] is None


def test_cost_rows_conservation_and_coverage(built) -> None:
    path, res = built
    with connect(path, read_only=True) as con:
        acct = {(r["category"], r["name"]): r["value"] for r in query_dicts(con, "SELECT * FROM accounting")}
    c = {n: v for (cat, n), v in acct.items() if cat == "cost"}
    attributed = 5.65 + 5.7 + 1.4 + 2.5
    orphan = 0.4 + 0.1
    recheck_overhead = 10.0 - (1.5 + 1.2 + 0.5 + 0.6)
    replay_overhead = (3.0 * 1 - 1.1) + (2.0 * 2 - (0.9 + 0.2))
    assert c["attributed_s"] == pytest.approx(attributed)
    assert c["unattributed_orphan_s"] == pytest.approx(orphan)
    assert c["unattributed_recheck_overhead_s"] == pytest.approx(recheck_overhead)
    assert c["unattributed_replay_overhead_s"] == pytest.approx(replay_overhead)
    unattributed = orphan + recheck_overhead + replay_overhead
    assert c["unattributed_s"] == pytest.approx(unattributed)
    assert c["coverage_seconds"] == pytest.approx(attributed / (attributed + unattributed))
    assert (c["records"], c["records_full_cost"], c["coverage_records"]) == (5, 5, 1.0)
    assert (c["accepted"], c["accepted_timed"]) == (3, 2)
    assert (c["recheck_runs_recorded"], c["replay_settings_recorded"]) == (1, 2)
    assert c["median_submit_to_accept_s"] == pytest.approx(25.0)
    # The phase totals the accounting table already had (from current_grades) are reproduced by the records.
    assert acct[("grader_seconds", "retries")] == pytest.approx(3.0 + 0.5 + 2.0)
    assert acct[("grader_seconds", "failures")] == pytest.approx(0.8 + 0.5)
    checks = _checks(res)
    assert checks["cost_conservation"].passed and checks["ledger_conservation"].passed
    assert checks["cost_coverage"].passed
    assert checks["cost_coverage"].metadata["coverage_seconds"].value == pytest.approx(
        attributed / (attributed + unattributed), abs=1e-6)


def test_status_section(built, tmp_path: Path) -> None:
    path, _ = built
    with connect(path, read_only=True) as con:
        s = SECTIONS["cost"](StatusContext(con, None, None))
    assert s["phase_totals_s"]["primary_total"] == pytest.approx(1.25 + 1.0 + 0.8 + 0.5)
    assert s["phase_totals_s"]["startup"] == pytest.approx(0.1 + 0.1 + 0.1 + 0.5)
    assert s["phase_totals_s"]["replay"] == pytest.approx(2.2) and s["phase_totals_s"]["superseded"] == 0.7
    # raw records' grader seconds 1.4, 2.5, 5.65, 5.7: median 4.075, p90 5.65 + 0.7 * 0.05 = 5.685
    assert s["per_record_s"] == {"median": pytest.approx(4.075), "p90": pytest.approx(5.685)}
    assert s["median_submit_to_accept_s"] == pytest.approx(25.0)
    assert s["coverage"]["records"] == 1.0 and s["coverage"]["records_total"] == 5
    assert 0 < s["coverage"]["seconds"] < 1
    assert s["overhead_sources"] == {"recheck_runs": 1, "replay_settings": 2, "primary_runs": None}
    json.dumps(s)  # plain JSON
    with connect(tmp_path / "empty.duckdb") as con:  # no accounting run yet: the section is left out
        assert SECTIONS["cost"](StatusContext(con, None, None)) is None


def test_ungraded_record_lowers_record_coverage_and_warns(tmp_path: Path) -> None:
    path = tmp_path / "w.duckdb"
    build_warehouse(path, extra_raw=("a_pending",))
    res = materialize(path)
    with connect(path, read_only=True) as con:
        c = {r["name"]: r["value"] for r in query_dicts(con, "SELECT * FROM accounting WHERE category = 'cost'")}
        pending = query_dicts(con, "SELECT * FROM record_costs WHERE record_key = 'a_pending'")[0]
    assert pending["terminal_state"] is None and pending["full_cost"] is False and pending["grader_s"] == 0
    assert (c["records"], c["records_full_cost"]) == (6, 5) and c["coverage_records"] == pytest.approx(5 / 6)
    checks = _checks(res)
    assert not checks["cost_coverage"].passed
    assert checks["cost_coverage"].severity == dg.AssetCheckSeverity.WARN
    assert checks["cost_conservation"].passed  # nothing was charged twice or dropped
    assert not checks["ledger_conservation"].passed and not res.success  # the unaccounted record itself blocks


def test_double_charged_record_breaks_conservation(tmp_path: Path) -> None:
    """A raw attempt admitted twice is charged twice: the seconds no longer add up, and the check says so."""
    path = tmp_path / "w.duckdb"
    build_warehouse(path, duplicate="a_retry")
    res = materialize(path)
    checks = _checks(res)
    assert not checks["cost_conservation"].passed
    assert checks["cost_conservation"].severity == dg.AssetCheckSeverity.ERROR and not res.success
    broken = checks["cost_conservation"].metadata["examples"].value
    assert "one cost row per ledger record" in broken and "per-record primary_total" in broken


def test_conservation_rules_catch_a_published_total_off_by_more_than_the_tolerance() -> None:
    sums = {"records": 2, "record_keys": 2, "ledger_rows": 2, "charged_quarantine": 0, "attributed_s": 10.0,
            **{p: 1.0 for p in cost.CONSERVED_PHASES}}
    published = {p: 1.0 for p in cost.CONSERVED_PHASES}
    costs = {"attributed_s": 10.0, "unattributed_orphan_s": 0.5, "unattributed_recheck_overhead_s": 1.0,
             "unattributed_replay_overhead_s": 0.0, "unattributed_s": 1.5, "recorded_s": 11.5}
    assert cost.conservation_problems(sums, published, costs, 10.5) == []
    assert cost.conservation_problems(sums, {**published, "timing": 1.0 + 1e-9}, costs, 10.5) == []
    [bad] = cost.conservation_problems(sums, {**published, "timing": 1.0 + 1e-4}, costs, 10.5)
    assert bad["rule"] == "per-record timing = grader_seconds/timing"
    [bad] = cost.conservation_problems(sums, published, costs, 10.6)  # a stored second charged nowhere
    assert bad["rule"] == "stored grade seconds = attributed + orphaned"
    assert cost.close(None, None) and not cost.close(0.0, None) and not cost.close(math.nan, 1.0)


def test_empty_warehouse_reports_unknown_coverage_not_zero(tmp_path: Path) -> None:
    """Nothing graded and no recheck run on record: coverage is unknown (NULL), never a made-up 0 or 1."""
    path = tmp_path / "w.duckdb"
    with connect(path):
        pass
    res = materialize(path)
    assert res.success and all(e.passed for e in res.get_asset_check_evaluations())
    with connect(path, read_only=True) as con:
        c = {r["name"]: r["value"] for r in query_dicts(con, "SELECT * FROM accounting WHERE category = 'cost'")}
        s = SECTIONS["cost"](StatusContext(con, None, None))
    assert c["records"] == 0 and c["coverage_records"] is None and c["coverage_seconds"] is None
    assert c["recheck_runs_recorded"] is None and c["attributed_s"] == 0
    assert s["coverage"]["seconds"] is None and s["per_record_s"] == {"median": None, "p90": None}
