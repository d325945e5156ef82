"""The `kerneltraj` command line: arguments, the project-local Dagster home, errors, and `import`."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import dagster as dg
import pytest

from assets import ingest
from pipelines import cli
from pipelines.resources import AttemptSources, Settings, Warehouse
from pipelines.warehouse import connect, query_dicts, scalar
from tests.conftest import REPO_ROOT, SHARED_DATA, project_env


def test_console_script_points_at_main():
    eps = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert eps.get("kerneltraj") == "pipelines.cli:main"


def test_release_flags_override_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELTRAJ_STATE_DIR", str(tmp_path / "state"))
    args = cli.build_parser().parse_args(["release", "--version", "v9.9.9", "--workers", "3", "--mode", "fresh",
                                          "--inputs", "a.jsonl", "b.jsonl", "--timeout-s", "5"])
    s = cli.settings_from_args(args)
    assert (s.release_version, s.workers, s.grader_mode, s.timeout_s) == ("v9.9.9", 3, "fresh", 5.0)
    assert [os.path.basename(p) for p in s.inputs] == ["a.jsonl", "b.jsonl"]
    assert s.warehouse_path == tmp_path / "state" / "warehouse.duckdb"
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["release", "--mode", "threads"])


def test_dagster_home_is_project_local_unless_set(monkeypatch, tmp_path):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    settings = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path / "state")})
    home = cli.ensure_dagster_home(settings)
    assert home == tmp_path / "state" / "dagster_home"
    assert os.environ["DAGSTER_HOME"] == str(home)
    assert (home / "dagster.yaml").read_text() == (REPO_ROOT / "dagster_home" / "dagster.yaml").read_text()
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "mine"))
    assert cli.ensure_dagster_home(settings) == tmp_path / "mine"
    assert (tmp_path / "mine" / "dagster.yaml").exists()


def _run(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT)


def test_status_without_a_warehouse_says_so(tmp_path):
    proc = _run(project_env(tmp_path, ()), "status", "--json")
    assert proc.returncode == 2
    assert "no warehouse" in proc.stderr and "kerneltraj release" in proc.stderr


def test_import_rejects_unknown_format(tmp_path):
    proc = _run(project_env(tmp_path, ()), "import", "no-such-format", str(tmp_path))
    assert proc.returncode == 2 and "known:" in proc.stderr


@pytest.mark.slow
def test_import_feeds_the_next_ingest(tmp_path, monkeypatch):
    """`kerneltraj import cuda-l1` writes attempts, refusals and cards that the raw_attempts stage admits."""
    src = SHARED_DATA / "cuda-l1" / "h100.jsonl"
    sample = tmp_path / "h100.jsonl"
    sample.write_bytes(b"\n".join(src.read_bytes().split(b"\n")[:4]) + b"\n")
    env = project_env(tmp_path, ())
    env.pop("KERNELTRAJ_INPUTS")
    proc = _run(env, "import", "cuda-l1", str(sample), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["attempts"] + summary["quarantined"] == 4
    settings = Settings.from_env(env)
    assert any("imports/cuda-l1/attempts.jsonl" in p for p in settings.inputs)
    assert settings.task_files and settings.quarantine_files

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    cli.ensure_dagster_home(settings)
    wh = Warehouse(path=str(settings.warehouse_path))
    imported = [p for p in settings.inputs if "imports" in p]
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([ingest.raw_attempts, *ingest.CHECKS], instance=instance, resources={
            "warehouse": wh, "attempt_sources": AttemptSources(paths=imported, task_files=list(settings.task_files),
                                                               quarantine_files=list(settings.quarantine_files))})
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    with connect(wh.path) as con:
        assert scalar(con, "SELECT count(*) FROM raw_attempts") == summary["attempts"]
        assert scalar(con, "SELECT count(*) FROM quarantine") == summary["quarantined"]
        rows = query_dicts(con, "SELECT source_format, json_extract_string(extra, '$.import_origin') AS o "
                                "FROM raw_attempts")
    assert all(r["source_format"] == "cuda-l1" and r["o"].startswith(str(sample)) for r in rows)


def test_publish_of_a_version_never_built_is_one_line(tmp_path):
    """Both with --dry-run and without: a version with no release folder is a usage error."""
    for extra in (("--dry-run", str(tmp_path / "out")), ()):
        proc = _run(project_env(tmp_path, ()), "publish", "--version", "v9.9", *extra)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "no release v9.9" in lines[0] and "kerneltraj release" in lines[0], lines


def test_grader_cli_with_a_missing_requests_file_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--in", str(tmp_path / "none.jsonl")],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read the requests file" in lines[0], lines


def test_import_help_names_every_importer():
    """`import -h` tells a user which layouts exist, not where they are registered in the code."""
    from pipelines.importers import IMPORTERS

    sub = next(a for a in cli.build_parser()._subparsers._group_actions if a.choices)
    text = sub.choices["import"].format_help()
    assert "pipelines.importers" not in text
    for name in IMPORTERS:
        assert name in text, name


def test_grader_tasks_lists_signatures_and_never_a_hidden_size():
    from grader.catalogue import load_catalogue

    proc = subprocess.run([sys.executable, "-m", "grader", "tasks", "--json"], capture_output=True, text=True,
                          timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = {r["task_id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    cards = load_catalogue()
    assert set(rows) == set(cards)
    assert rows["silu_mul_fp16"]["signature"] == "run(gate: float16[M, N], up: float16[M, N]) -> float16[M, N]"
    for task_id, card in cards.items():
        for size in (s for sizes in card.hidden_sizes.values() for s in sizes):
            if size not in (s for sizes in card.public_sizes.values() for s in sizes):
                assert json.dumps(size) not in proc.stdout, (task_id, size)


def test_quarantine_lists_every_row_with_its_reason_and_file_line(tmp_path, monkeypatch):
    """The rows the ingest refused, as a user asks for them: file:line, code and reason."""
    malformed = REPO_ROOT / "demo" / "malformed.jsonl"
    env = project_env(tmp_path, (malformed,))
    settings = Settings.from_env(env)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    cli.ensure_dagster_home(settings)
    wh = Warehouse(path=str(settings.warehouse_path))
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([ingest.raw_attempts], instance=instance, resources={
            "warehouse": wh, "attempt_sources": AttemptSources(paths=[str(malformed)])})
    assert result.success
    with connect(wh.path) as con:
        expected = query_dicts(con, "SELECT origin, reason_code FROM quarantine ORDER BY origin")
    assert expected, "the demo's malformed file must quarantine rows"
    proc = _run(env, "quarantine", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["origin"], r["reason_code"]) for r in rows] == [(e["origin"], e["reason_code"]) for e in expected]
    assert all(r["reason"] and r["origin"].rsplit(":", 1)[1].isdigit() for r in rows)
    code = expected[0]["reason_code"]
    only = json.loads(_run(env, "quarantine", "--json", "--reason", code).stdout)
    assert only and {r["reason_code"] for r in only} == {code}
    text = _run(env, "quarantine")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == len(expected)
    assert f"{len(expected)} quarantined row(s)" in text.stderr


def test_import_of_random_bytes_is_refused_and_writes_nothing(tmp_path):
    """From the release issue: 2 MB of random bytes became 8,069 quarantined rows and a release."""
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(200_000))
    env = project_env(tmp_path, ())
    for fmt in ("cuda-l1", "kernelbench"):
        proc = _run(env, "import", fmt, str(garbage))
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "not a cuda-l1 corpus" in _run(env, "import", "cuda-l1", str(garbage)).stderr
    assert not (tmp_path / "state" / "imports").exists()


def test_a_corpus_with_a_few_bad_lines_still_imports(tmp_path):
    from pipelines.importers import ImportBatch
    from pipelines.rawattempt import Quarantined

    bad = [Quarantined(f"a.jsonl:{i}", None, "bad_json", "not JSON", "") for i in range(3)]
    batch = ImportBatch(format="cuda-l1", attempts=[], quarantined=bad, cards=[], claims=[])
    assert cli.undecodable_files(batch) == {}  # fewer than 5 records: too few to call it noise
    more = bad + [Quarantined(f"a.jsonl:{i}", "x", "unknown_task", "no card", "") for i in range(10, 17)]
    assert cli.undecodable_files(ImportBatch("cuda-l1", [], more, [], [])) == {}
    noise = bad + [Quarantined(f"a.jsonl:{i}", None, "bad_encoding", "binary", "") for i in range(10, 17)]
    assert cli.undecodable_files(ImportBatch("cuda-l1", [], noise, [], [])) == {"a.jsonl": (10, 10)}
