"""The Dagster pipeline against a real Dagster instance, a real DuckDB file and the real grader.

Fast tests cover the warehouse and the ingest stage; the `slow` ones run the whole release on a
small slice of the demo corpus (real grader workers on CPU), then check the ledger, the checks,
the published files, `kerneltraj status --json`, `kerneltraj lineage`, and that a second
materialisation resumes without grading anything again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from assets import ingest
from pipelines.grading.passes import PASS_PRIMARY, commit_grades, grade_row, pass_seed
from pipelines.publishing.release_files import CONFIGS, config_shards
from grader.contract import GRADER_VERSION, REWARD_FLOOR, GradeResult, Reason, Status
from pipelines.defs.definitions import RELEASE_JOB, build_defs
from pipelines.core.settings import Settings
from pipelines.grading.backend import GradeOutcome
from pipelines.defs.resources import AttemptSources, Warehouse
from pipelines.core.warehouse import connect, load_sql, query_dicts, scalar
from tests.conftest import ReleaseProject


# ---- warehouse ------------------------------------------------------------------------------

def test_load_sql_by_name_and_section():
    assert "CREATE OR REPLACE VIEW ledger" in load_sql("ledger")
    assert "graded_attempts" in load_sql("grading.pending_primary")
    with pytest.raises(ValueError):
        load_sql("../schema")
    with pytest.raises(KeyError):
        load_sql("grading.no_such_query")
    with pytest.raises(FileNotFoundError):
        load_sql("no_such_file")


def _grade(attempt_id: str, status: Status = Status.WRONG_OUTPUT) -> GradeOutcome:
    result = GradeResult(attempt_id=attempt_id, task_id="softmax_rows_fp32", task_revision="rev1",
                         grader_version=GRADER_VERSION, status=status, reason_code=Reason.MISMATCH,
                         reason="element (3, 4) outside tolerance", reward=REWARD_FLOOR, seed=7, profile="cpu",
                         device="cpu", fingerprint_id="fp1", fingerprint={"kind": "cpu"},
                         phase_seconds={"startup": 0.5, "total": 1.5})
    return GradeOutcome(result, tries=1, retry_s=0.0)


def test_grade_batch_is_all_or_nothing(tmp_path):
    """A batch that fails half-way (one bad row) leaves the table exactly as before the batch."""
    wh = Warehouse(path=str(tmp_path / "w.duckdb"))
    first = [grade_row(_grade(f"a{i}"), PASS_PRIMARY, "sha", "run-1", None) for i in range(3)]
    commit_grades(wh, first, {"fp1": {"kind": "cpu"}}, "run-1")
    second = [grade_row(_grade(f"a{i}", Status.CHEAT_FLAGGED), PASS_PRIMARY, "sha", "run-2", None)
              for i in range(3)]
    second[2]["status"] = None  # violates NOT NULL after the deletes and two inserts of this batch ran
    with pytest.raises(duckdb.ConstraintException):
        commit_grades(wh, second, {}, "run-2")
    with connect(wh.path) as con:
        rows = query_dicts(con, "SELECT attempt_id, status, run_id FROM graded_attempts ORDER BY attempt_id")
        assert rows == [{"attempt_id": f"a{i}", "status": "wrong_output", "run_id": "run-1"} for i in range(3)]
        assert scalar(con, "SELECT count(*) FROM fingerprints") == 1


def test_seeds_are_per_pass_and_reproducible():
    assert pass_seed("a1", "primary") == pass_seed("a1", "primary")
    assert pass_seed("a1", "primary") != pass_seed("a1", "revalidation")
    assert 0 <= pass_seed("a1", "primary") < 2**63


# ---- ingest against a real instance ----------------------------------------------------------

def test_instance_config_from_template(instance):
    cfg = instance.get_concurrency_config()
    assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
    assert cfg.pool_config.default_pool_limit == 1
    assert instance.event_log_storage.get_concurrency_info("gpu").limit == 1
    assert not instance.telemetry_enabled
    assert Path(instance.root_directory) == Path(os.environ["DAGSTER_HOME"])
    assert (Path(os.environ["DAGSTER_HOME"]) / "history" / "runs.db").exists()


def test_ingest_accounts_every_input_line(instance, tmp_path, demo_subset):
    attempts, malformed = demo_subset
    wh = Warehouse(path=str(tmp_path / "w.duckdb"))
    result = dg.materialize([ingest.raw_attempts, *ingest.CHECKS], instance=instance,
                            resources={"warehouse": wh, "attempt_sources": AttemptSources(
                                paths=[str(attempts), str(malformed)])})
    assert result.success
    evals = result.get_asset_check_evaluations()
    assert len(evals) == len(ingest.CHECKS) and all(e.passed for e in evals)
    n_good = len([ln for ln in attempts.read_bytes().split(b"\n") if ln.strip()])
    n_bad = len([ln for ln in malformed.read_bytes().split(b"\n") if ln.strip()])
    with connect(wh.path) as con:
        assert scalar(con, "SELECT count(*) FROM raw_attempts") == n_good
        assert scalar(con, "SELECT count(*) FROM quarantine") == n_bad
        # Ungraded attempts are unaccounted; quarantined rows already have their terminal state.
        states = dict(con.execute("SELECT ledger_source, count(terminal_state) FROM ledger GROUP BY 1").fetchall())
        assert states == {"raw": 0, "quarantine": n_bad}
        origins = [r[0] for r in con.execute("SELECT origin FROM quarantine ORDER BY origin").fetchall()]
    assert origins == [f"{malformed}:{i}" for i in range(1, n_bad + 1)]


# ---- the whole release, end to end -----------------------------------------------------------

@pytest.fixture(scope="module")
def project(release_project: ReleaseProject) -> ReleaseProject:
    """The session's shared release (tests/conftest.py): a release killed (SIGKILL) once it had committed
    grades, then run again to completion."""
    return release_project


@pytest.fixture()
def project_instance(project, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", project.env["DAGSTER_HOME"])
    with dg.DagsterInstance.get() as inst:
        yield inst


def _input_lines(p: ReleaseProject) -> int:
    return sum(len([ln for ln in f.read_bytes().split(b"\n") if ln.strip()])
               for f in (p.attempts_file, p.malformed_file))


@pytest.mark.slow
def test_release_progress_names_every_stage(project):
    err = project.release.stderr
    for stage in ("raw_attempts", "graded_attempts", "trajectories", "revalidated_records", "family_splits",
                  "accounting", "release"):
        assert f"] {stage} ..." in err
    assert "grading (primary)" in err and "grading (revalidation)" in err


@pytest.mark.slow
def test_ledger_conserves_every_input_row(project):
    with connect(project.settings.warehouse_path, read_only=True) as con:
        ledger = query_dicts(con, "SELECT ledger_source, record_key, terminal_state FROM ledger")
        raw_ids = {r[0] for r in con.execute("SELECT attempt_id FROM raw_attempts").fetchall()}
        acct = {(r["category"], r["name"]): r["value"] for r in query_dicts(con, load_sql("accounting.published"))}
    assert len(ledger) == _input_lines(project)
    assert len({(r["ledger_source"], r["record_key"]) for r in ledger}) == len(ledger)
    assert all(r["terminal_state"] for r in ledger)
    assert {r["record_key"] for r in ledger if r["ledger_source"] == "raw"} == raw_ids
    assert acct[("ledger", "attempts_in")] == len(ledger) and acct[("ledger", "unaccounted")] == 0
    assert sum(v for (cat, _), v in acct.items() if cat == "terminal_state") == len(ledger)
    assert acct[("grader_seconds", "primary_total")] > 0 and acct[("grader_seconds", "revalidation")] > 0


def release_check_keys(project) -> set:
    """Every check of the release job's assets (publishing runs in its own job)."""
    keys = build_defs(project.settings).resolve_asset_graph().asset_check_keys
    return {k for k in keys if k.asset_key.to_user_string() != "published_release"}


@pytest.mark.slow
def test_every_check_ran_and_passed(project, project_instance):
    run = project_instance.get_runs(dg.RunsFilter(job_name=RELEASE_JOB), limit=1)[0]
    assert run.status == dg.DagsterRunStatus.SUCCESS
    evals = [r.event_log_entry.dagster_event.event_specific_data for r in project_instance.get_records_for_run(
        run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records]
    assert {e.asset_check_key for e in evals} == release_check_keys(project)
    assert [e.check_name for e in evals if not e.passed] == []


@pytest.mark.slow
def test_published_files_hold_cheats_at_the_floor_and_nothing_sealed(project):
    root = project.settings.releases_dir / project.settings.release_version
    card = (root / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert [c["config_name"] for c in front["configs"]] == list(CONFIGS)
    assert front["license"] and front["task_categories"] and front["size_categories"] == ["n<1K"]
    assert front["kerneltraj"]["grader_version"] == GRADER_VERSION
    con = duckdb.connect()
    grades = [g for shard in config_shards(root, "grades")
              for g in query_dicts(con, "SELECT * FROM read_parquet($p)", {"p": str(shard)})]
    attempts = {json.loads(line)["attempt_id"]: json.loads(line)
                for line in project.attempts_file.read_text().splitlines() if line.strip()}
    cheats = {a for a, rec in attempts.items() if str(rec.get("extra", {}).get("intended", "")).startswith("cheat:")}
    assert cheats, "the subset must hold planted cheats"
    for g in grades:
        if g["attempt_id"] in cheats:
            assert g["reward"] == REWARD_FLOOR and g["status"] in ("cheat_flagged", "wrong_output"), g
        for size in json.loads(g["sizes"]):
            assert not size["hidden"] or size["size_key"].startswith("hidden#")
    assert {(g["attempt_id"], g["grading_pass"]) for g in grades} >= {(a, "primary") for a in attempts}
    for config in CONFIGS:
        assert config_shards(root, config), f"release holds no shard of {config}"


@pytest.mark.slow
def test_status_json(project):
    status = json.loads(project.cli("status", "--json").stdout)
    ledger = status["ledger"]
    assert ledger["attempts_in"] == _input_lines(project)
    assert ledger["unaccounted"] == 0
    assert sum(ledger["terminal_states"].values()) == ledger["attempts_in"]
    assert status["tables"]["raw_attempts"] == len(project.attempts_file.read_text().splitlines())
    assert {"raw_attempts", "graded_attempts", "trajectories", "revalidated_records", "family_splits",
            "accounting", "release"} <= set(status["tables"])
    n_checks = len(release_check_keys(project))
    assert len(status["checks"]) == n_checks and all(c["passed"] is True for c in status["checks"])
    assert status["release"]["version"] == project.settings.release_version


@pytest.mark.slow
def test_lineage_walks_back_to_file_line_grades_run_and_fingerprint(project, project_instance):
    lines = [ln for ln in project.attempts_file.read_text().split("\n")]
    line_no, rec = next((i, json.loads(ln)) for i, ln in enumerate(lines, 1) if ln.strip())
    t = json.loads(project.cli("lineage", rec["attempt_id"], "--json").stdout)
    raw = t["raw_attempt"]
    assert raw["origin"] == f"{project.attempts_file}:{line_no}"
    assert (raw["agent"], raw["trajectory_id"], raw["turn"]) == (rec["agent"], rec["trajectory_id"], rec["turn"])
    assert {g["grading_pass"] for g in t["grades"] if g["current"]} == {"primary", "revalidation"}
    assert all(g["grader_version"] == GRADER_VERSION and g["task_revision"] for g in t["grades"])
    assert len({g["seed"] for g in t["grades"]}) == 2
    release_run = project_instance.get_runs(dg.RunsFilter(job_name=RELEASE_JOB), limit=1)[0].run_id
    assert t["dagster_runs"]["release"]["run_id"] == release_run
    primary = next(g for g in t["grades"] if g["current"] and g["grading_pass"] == "primary")
    # The grade may come from the killed first run (resumed, not regraded): lineage names that run.
    assert t["dagster_runs"]["grade_primary"]["run_id"] == primary["run_id"]
    assert t["dagster_runs"]["grade_primary"]["status"] in ("SUCCESS", "FAILURE")
    assert t["fingerprints"] and t["fingerprints"][0]["fingerprint_id"] == t["grades"][0]["fingerprint_id"]
    assert t["release"]["published"] is True
    text = project.cli("lineage", rec["attempt_id"]).stdout
    assert f"{project.attempts_file}:{line_no}" in text
    missing = project.cli("lineage", "no-such-attempt", check=False)
    assert missing.returncode == 2 and "no attempt" in missing.stderr


@pytest.mark.slow
def test_second_materialisation_resumes_without_regrading(project, tmp_path, monkeypatch):
    """Nothing already judged is graded again; only grader failures (infra_error) would be retried.

    Runs on a copy of the shared project (warehouse, Dagster instance and release), which the other tests read."""
    copy = project.copy(tmp_path / "copy")
    env = {**project.env, "KERNELTRAJ_STATE_DIR": str(copy / "state"), "KERNELTRAJ_SPLITS": str(copy / "splits"),
           "DAGSTER_HOME": str(copy / "dagster_home")}
    for k, v in env.items():  # in process, assets read the same variables the CLI gave the release
        monkeypatch.setenv(k, v)
    settings = Settings.from_env(env)
    assert settings.warehouse_path != project.settings.warehouse_path
    query = "SELECT attempt_id, grading_pass, status, run_id, graded_at FROM graded_attempts ORDER BY 1, 2"
    with connect(settings.warehouse_path, read_only=True) as con:
        before = query_dicts(con, query)
    retried = {p: sum(1 for r in before if r["grading_pass"] == p and r["status"] == "infra_error")
               for p in ("primary", "revalidation")}
    job = build_defs(settings).resolve_job_def(RELEASE_JOB)
    with dg.DagsterInstance.get() as copy_instance:
        result = job.execute_in_process(instance=copy_instance, raise_on_error=False)
    assert result.success
    md = result.asset_materializations_for_node("graded_attempts")[0].metadata
    assert md["graded_this_run"].value == retried["primary"]
    n_primary = sum(1 for r in before if r["grading_pass"] == "primary")
    assert n_primary == len(project.attempts_file.read_text().splitlines())
    assert md["resumed_without_regrade"].value == n_primary - retried["primary"]
    md = result.asset_materializations_for_node("revalidated_records")[0].metadata
    assert md["regraded_this_run"].value == retried["revalidation"]
    with connect(settings.warehouse_path, read_only=True) as con:
        after = query_dicts(con, query)
    judged = [r for r in before if r["status"] != "infra_error"]
    assert judged and all(r in after for r in judged)


@pytest.mark.slow
@pytest.mark.faults
def test_killed_release_keeps_its_committed_grades_and_frees_the_gpu_pool(project, project_instance):
    """SIGKILL mid-grading: whole batches survive and are not graded again, the dead run is marked
    failed and its `gpu` pool slot freed (else the second release would wait on it forever)."""
    killed_run = project.killed_run_grades[0]["run_id"]
    assert f"recovered stale run {killed_run}" in project.release.stderr
    assert project_instance.get_run_by_id(killed_run).status == dg.DagsterRunStatus.FAILURE
    assert project_instance.event_log_storage.get_concurrency_info("gpu").claimed_slots == []
    with connect(project.settings.warehouse_path, read_only=True) as con:
        now = query_dicts(con, "SELECT attempt_id, grading_pass, status, run_id, graded_at FROM graded_attempts")
    judged = [g for g in project.killed_run_grades if g["status"] != "infra_error"]
    assert judged and all(g in now for g in judged)
    assert {g["run_id"] for g in project.killed_run_grades} == {killed_run}
    # killed mid primary pass (the fixture's `KILL_TRIES`): the second release graded the rest of it itself
    primary = [g for g in now if g["grading_pass"] == "primary"]
    assert any(g["run_id"] != killed_run for g in primary), "the killed release had graded its whole primary pass"
