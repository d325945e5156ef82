"""The `kerneltraj` command line: arguments, the project-local Dagster home, errors, and `import`."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets import ingest
from pipelines import cli
from pipelines.core.settings import Settings
from pipelines.defs.resources import AttemptSources, Warehouse
from pipelines.core.warehouse import connect, query_dicts, scalar
from tests.conftest import REPO_ROOT, SHARED_DATA, project_env, run_cli


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


def test_dagster_community_pop_up_is_off_in_project_instances(monkeypatch, tmp_path):
    """The UI's first page is not covered by Dagster's community dialog: the template turns it off, and a
    project-local dagster.yaml written before that gains the setting; a user's own DAGSTER_HOME is left as is."""
    import yaml

    assert yaml.safe_load(cli.TEMPLATE_YAML.read_text())["nux"] == {"enabled": False}
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    settings = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path / "state")})
    old = (tmp_path / "state" / "dagster_home" / "dagster.yaml")
    old.parent.mkdir(parents=True)
    old.write_text("telemetry:\n  enabled: false\n")
    cli.ensure_dagster_home(settings)
    assert yaml.safe_load(old.read_text()) == {"telemetry": {"enabled": False}, "nux": {"enabled": False}}
    with dg.DagsterInstance.get() as instance:
        assert not instance.nux_enabled
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(mine))
    cli.ensure_dagster_home(settings)
    assert (mine / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def _run(env, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO_ROOT)


def test_status_without_a_warehouse_says_so(tmp_path):
    proc = run_cli(project_env(tmp_path, ()), "status", "--json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no warehouse" in proc.stderr and "kerneltraj release" in proc.stderr


def _one_line(proc, code: int = 2) -> str:
    """The stderr of a refused command: exit `code`, exactly one line, no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return lines[0]


def test_import_rejects_unknown_format(tmp_path):
    line = _one_line(_run(project_env(tmp_path, ()), "import", "no-such-format", str(tmp_path)))
    assert "no-such-format" in line and "cuda-l1" in line and "kernelbench -h" not in line


@pytest.mark.slow
def test_bad_arguments_are_one_line_each(tmp_path):
    """Mistakes a user can make on the command line: each is one line that says what to do."""
    env = project_env(tmp_path, ())
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.bin").write_bytes(b"x")
    cases = [
        (("release", "--workers", "0"), "--workers"),
        (("release", "--timeout-s", "-1"), "--timeout-s"),
        (("release", "--inputs", str(tmp_path / "none.jsonl")), "none.jsonl is not a file"),
        (("import", "cuda-l1", str(tmp_path / "none.jsonl")), "does not exist"),
        (("import", "kernelbench", str(tmp_path / "file.bin")), "reads folders"),
        (("import", "flashinfer-bench", str(tmp_path / "empty")), "found no flashinfer-bench records"),
        (("import", "cuda-l1", str(tmp_path / "empty")), "found no cuda-l1 records"),
        (("imports", "--remove", "cuda-l1/nope"), "no import 'cuda-l1/nope'"),
        (("ui", "--port", "http"), "--port"),
        (("lineage",), "record_id"),
    ]
    for args, says in cases:
        assert says in _one_line(_run(env, *args)), args
    assert not (tmp_path / "state" / "imports").exists()
    bad_env = {**env, "KERNELTRAJ_WORKERS": "many"}
    assert "KERNELTRAJ_WORKERS='many'" in _one_line(_run(bad_env, "status"))


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
    assert any("imports/cuda-l1/h100-" in p and p.endswith("/attempts.jsonl") for p in settings.inputs)
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


def _grader(*args):
    return subprocess.run([sys.executable, "-m", "grader", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT)


def test_grader_cli_with_a_missing_requests_file_is_one_line(tmp_path):
    assert "cannot read the requests file" in _one_line(_grader("grade", "--in", str(tmp_path / "none.jsonl")))


def test_grader_cli_usage_errors_are_one_line(tmp_path):
    """An unknown task is the user's mistake, said before any worker starts, not an infra_error grade."""
    req = {"attempt_id": "a1", "task_id": "no_such_task", "source": "def run(x):\n    return x\n",
           "language": "triton"}
    good = {**req, "task_id": "gelu_fp32"}
    (tmp_path / "unknown.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(req) + "\n")
    (tmp_path / "good.jsonl").write_text(json.dumps(good) + "\n")
    out = tmp_path / "results.jsonl"
    line = _one_line(_grader("grade", "--in", str(tmp_path / "unknown.jsonl"), "--out", str(out)))
    assert "unknown.jsonl:2" in line and "'no_such_task'" in line and "python -m grader tasks" in line
    assert not out.exists()
    good_in = ("--in", str(tmp_path / "good.jsonl"))
    assert "cannot write the results file" in _one_line(
        _grader("grade", *good_in, "--out", str(tmp_path / "no" / "dir" / "r.jsonl")))
    assert "cannot read the task-card file" in _one_line(
        _grader("grade", *good_in, "--catalogue-extra", str(tmp_path / "none.jsonl")))
    assert "not a JSON-lines file of task cards" in _one_line(
        _grader("grade", *good_in, "--catalogue-extra", str(tmp_path / "good.jsonl")))
    assert "--workers" in _one_line(_grader("grade", *good_in, "--workers", "0"))
    assert "--device" in _one_line(_grader("grade", *good_in, "--device", "tpu"))


def test_import_help_names_every_importer():
    """`import -h` tells a user which layouts exist, not where they are registered in the code."""
    from pipelines.importers import IMPORTERS

    sub = next(a for a in cli.build_parser()._subparsers._group_actions if a.choices)
    text = sub.choices["import"].format_help()
    assert "pipelines.importers" not in text
    for name in IMPORTERS:
        assert name in text, name


def test_every_option_of_every_command_has_help():
    import argparse

    def undocumented(parser: argparse.ArgumentParser, name: str) -> list[str]:
        out = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                out += [f"{n} (no summary)" for n, sub in action.choices.items()
                        if not any(c.dest == n and c.help for c in action._choices_actions)]
                out += [x for n, sub in action.choices.items() for x in undocumented(sub, n)]
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                out.append(f"{name} {action.dest}")
        return out

    assert undocumented(cli.build_parser(), "kerneltraj") == []


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
    garbage.write_bytes(os.urandom(2_000_000))
    env = project_env(tmp_path, ())
    assert "not a cuda-l1 corpus" in _one_line(_run(env, "import", "cuda-l1", str(garbage)))
    assert "reads folders" in _one_line(_run(env, "import", "kernelbench", str(garbage)))
    assert not (tmp_path / "state" / "imports").exists()


def test_a_corpus_with_a_few_bad_lines_still_imports(tmp_path):
    from pipelines.importers import ImportBatch, undecodable_files
    from pipelines.core.rawattempt import Quarantined

    bad = [Quarantined(f"a.jsonl:{i}", None, "bad_json", "not JSON", "") for i in range(3)]
    batch = ImportBatch(format="cuda-l1", attempts=[], quarantined=bad, cards=[], claims=[])
    assert undecodable_files(batch) == {}  # fewer than 5 records: too few to call it noise
    more = bad + [Quarantined(f"a.jsonl:{i}", "x", "unknown_task", "no card", "") for i in range(10, 17)]
    assert undecodable_files(ImportBatch("cuda-l1", [], more, [], [])) == {}
    noise = bad + [Quarantined(f"a.jsonl:{i}", None, "bad_encoding", "binary", "") for i in range(10, 17)]
    assert undecodable_files(ImportBatch("cuda-l1", [], noise, [], [])) == {"a.jsonl": (10, 10)}


needs_cuda_l1 = pytest.mark.skipif(not (SHARED_DATA / "cuda-l1" / "a100.jsonl").is_file(),
                                   reason="shared CUDA-L1 corpus not present")


@needs_cuda_l1
def test_two_files_of_one_corpus_are_both_kept(tmp_path):
    """From the release issue: importing a100.jsonl after h100.jsonl silently replaced the h100 import."""
    env = project_env(tmp_path, ())
    env.pop("KERNELTRAJ_INPUTS")
    files = {}
    for gpu in ("h100", "a100"):
        files[gpu] = tmp_path / f"{gpu}.jsonl"
        files[gpu].write_bytes(b"\n".join((SHARED_DATA / "cuda-l1" / f"{gpu}.jsonl").read_bytes()
                                          .split(b"\n")[:2]) + b"\n")
        proc = _run(env, "import", "cuda-l1", str(files[gpu]), timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert not json.loads(proc.stdout)["replaced"]
    listed = json.loads(_run(env, "imports", "--json").stdout)
    assert sorted(s for e in listed for s in e["sources"]) == sorted(str(f) for f in files.values())
    settings = Settings.from_env(env)
    ids = {json.loads(line)["attempt_id"] for p in settings.inputs if "imports" in p
           for line in Path(p).read_text().splitlines()}
    assert {i.split(":")[1] for i in ids} == {"h100", "a100"}
    # the same file again replaces its own import only
    again = _run(env, "import", "cuda-l1", str(files["h100"]), timeout=300)
    assert json.loads(again.stdout)["replaced"] and len(json.loads(_run(env, "imports", "--json").stdout)) == 2
    text = _run(env, "imports")
    assert text.returncode == 0 and len(text.stdout.splitlines()) == 2 and "2 import(s)" in text.stderr
    a100 = next(e["import_id"] for e in listed if e["sources"] == [str(files["a100"])])
    assert _run(env, "imports", "--remove", a100).returncode == 0
    assert [e["sources"] for e in json.loads(_run(env, "imports", "--json").stdout)] == [[str(files["h100"])]]
    assert not any("a100" in p for p in Settings.from_env(env).inputs)


def test_kernelbench_runs_without_their_tasks_warn_at_import(tmp_path):
    """From the release issue: `import kernelbench` found 0 tasks silently; the attempts were
    quarantined unknown_task one release later."""
    env = project_env(tmp_path, ())
    proc = _run(env, "import", "kernelbench", str(REPO_ROOT / "tests" / "fixtures" / "kernelbench_run" / "runs"),
                timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    warning = [ln for ln in proc.stderr.splitlines() if "warning" in ln]
    assert summary["tasks"] == 0 and len(warning) == 1
    assert f"{summary['attempts']} of {summary['attempts']} attempts" in warning[0]
    assert "unknown_task" in warning[0] and "problems folder" in warning[0]


def test_lineage_by_file_line_and_readable_text(tmp_path, monkeypatch, demo_subset):
    """An admitted row's file:line leads to its attempt; the text has no Python reprs."""
    attempts, malformed = demo_subset
    env = project_env(tmp_path, (attempts, malformed))
    settings = Settings.from_env(env)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    cli.ensure_dagster_home(settings)
    wh = Warehouse(path=str(settings.warehouse_path))
    with dg.DagsterInstance.get() as instance:
        assert dg.materialize([ingest.raw_attempts], instance=instance, resources={
            "warehouse": wh, "attempt_sources": AttemptSources(paths=[str(attempts), str(malformed)])}).success
    with connect(wh.path) as con:
        admitted = query_dicts(con, "SELECT attempt_id, origin FROM raw_attempts ORDER BY origin LIMIT 1")[0]
    env["DAGSTER_HOME"] = str(tmp_path / "home")
    by_line = run_cli(env, "lineage", admitted["origin"], cwd=tmp_path)
    assert by_line.returncode == 0, by_line.stderr
    assert admitted["attempt_id"] in by_line.stdout and "terminal state: none yet" in by_line.stdout
    assert not any(bad in by_line.stdout for bad in ("None", "[", "{", "'"))
    as_json = json.loads(run_cli(env, "lineage", "--json", admitted["origin"], cwd=tmp_path).stdout)
    assert as_json["raw_attempt"]["attempt_id"] == admitted["attempt_id"]
    line = _one_line(_run(env, "lineage", str(attempts) + ":99999"))
    assert "kerneltraj quarantine" in line


def test_plain_status_names_splits_revalidation_and_the_learning_verdict():
    from pipelines.cli.status import render_text

    status = {
        "release": {"version": "v1.2.3", "path": "/r/v1.2.3", "published": None},
        "ledger": {"attempts_in": 14, "unaccounted": 0, "terminal_states": {"revalidated": 10, "quarantined": 4}},
        "tables": {"raw_attempts": 10}, "checks": [{"name": "a:b", "passed": True}, {"name": "c:d", "passed": False}],
        "splits": {"version": "v1", "manifest_sha256": "ab" * 32, "sizes": {"train": 15, "test_heldout": 6},
                   "leakage": {"task_in_two_splits": 0, "near_duplicate_code": 2}},
        "revalidation": {"recheck": {"units": 10, "agree": 8, "disagree": 1, "ambiguous": 1, "missing": 0,
                                     "agree_rate": 0.8, "false_fast": 1, "first_fast": 3, "throughput": None},
                         "contention": None},
        "learning_comparison": {"verdict": "inconclusive", "n_tasks": 6, "regressed_families": [], "metrics": [
            {"metric": "fast_1", "scope": "overall", "baseline": 0.5, "treatment": 0.6, "diff": 0.1,
             "ci_low": -0.2, "ci_high": 0.4, "verdict": "inconclusive"}]},
    }
    text = render_text(status)
    lines = {ln.split()[0]: ln for ln in text.splitlines()}
    assert "1 of 2 passed" in lines["checks"] and "c:d" in lines["checks"]
    assert "train 15" in lines["splits"] and "near_duplicate_code 2" in lines["splits"]
    assert "8 agree" in lines["revalidation"] and "80.0%" in lines["revalidation"]
    assert "false-fast 1 of 3" in lines["revalidation"]
    assert "verdict inconclusive over 6 held-out tasks" in lines["learning"]
    assert "fast_1" in lines and "0.5 -> 0.6" in lines["fast_1"]
    assert "{" not in text and "None" not in text
    assert "none yet" in render_text({"release": {"version": None, "note": "no release yet"}})


RELU_REFERENCE = ("import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                  "        return torch.relu(x)\n\nN = 4096\n\ndef get_inputs():\n    return [torch.randn(N)]\n\n"
                  "def get_init_inputs():\n    return []\n")


@pytest.fixture()
def probe_stub(monkeypatch):
    """CUDA-L1 imports whose output probe is a stand-in (the shapes of RELU_REFERENCE), so cards are made
    without starting the sandbox; everything after the probe is the real importer."""
    import functools

    from pipelines.importers import cuda_l1
    from pipelines.importers import kernelbench as kb

    def probe(jobs):
        return {k: kb.ProbeResult((4096,), "float32", 4096) for k in jobs}

    monkeypatch.setattr(cuda_l1, "import_path", functools.partial(cuda_l1.import_path, probe=probe))


def test_the_same_row_in_several_imported_files_is_one_attempt(tmp_path, monkeypatch, capsys, probe_stub):
    """From the release issue: the same CUDA-L1 row in three files became three trajectories (the published
    corpus has one candidate per task in each GPU's file, often the same code). Now the release keeps one
    attempt, every other copy ends quarantined as duplicate_attempt naming both origins, each claim is held
    against the one grade, and the ledger shows every row once."""
    row = {"level_id": 1, "task_id": 19, "ref_code": RELU_REFERENCE, "score_default": 1.7, "score_cudnn": "fast",
           "custom_code": "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                          "        return x.clamp_min(0)\n"}
    other = {**row, "task_id": 20, "custom_code": row["custom_code"].replace("clamp_min(0)", "relu()")}
    files = {n: tmp_path / f"{n}.jsonl" for n in ("x", "y", "z", "w")}
    for n, f in files.items():
        f.write_text(json.dumps(row) + "\n" + (json.dumps(other) + "\n" if n == "x" else ""))
    env = project_env(tmp_path, ())
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("KERNELTRAJ_INPUTS")
    said = []
    for paths in ([files["x"]], [files["y"]], [files["z"], files["w"]]):  # three imports, the last of two files
        assert cli.main(["import", "cuda-l1", *map(str, paths)]) == 0
        said.append(capsys.readouterr().err)
    assert "repeat" not in said[0] and f"{files['x']}:1: score_cudnn is \"fast\" (str)" in said[0]
    assert "repeat the task and source code of one in import cuda-l1/x-" in said[1]
    assert f"{files['w']}:1 repeats {files['z']}:1" in said[2] and "cuda-l1/y-" in said[2]

    settings = Settings.from_env()
    cli.ensure_dagster_home(settings)
    imported = [p for p in settings.inputs if "imports" in p]
    wh = Warehouse(path=str(settings.warehouse_path))
    from assets.claims import claim_audit

    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([ingest.raw_attempts, *ingest.CHECKS, claim_audit], instance=instance, resources={
            "warehouse": wh, "attempt_sources": AttemptSources(
                paths=imported, task_files=list(settings.task_files),
                quarantine_files=list(settings.quarantine_files))})
    assert result.success and all(e.passed for e in result.get_asset_check_evaluations())
    with connect(wh.path) as con:
        kept = query_dicts(con, "SELECT attempt_id, json_extract_string(extra, '$.import_origin') AS o "
                                "FROM raw_attempts ORDER BY task_id")
        repeats = query_dicts(con, "SELECT * FROM quarantine WHERE reason_code = 'duplicate_attempt' "
                                   "ORDER BY import_origin")
        ledger = query_dicts(con, "SELECT terminal_state, count(*) AS n FROM ledger GROUP BY ALL")
        audited = query_dicts(con, "SELECT attempt_id, audit_reason FROM claim_audit WHERE baseline = 'default'")
    # one copy of the row (the first in the order the release reads imports), and the other task
    copies = {f"{f}:1" for f in files.values()}
    assert kept[0]["o"] in copies and kept[1]["o"] == f"{files['x']}:2"
    first = kept[0]["attempt_id"]
    assert sorted(r["import_origin"] for r in repeats) == sorted(copies - {kept[0]["o"]})
    for r in repeats:
        assert r["duplicate_of"] == first and r["import_origin"] in r["reason"] and kept[0]["o"] in r["reason"]
    # every input row once: 2 admitted (no grade yet, so no terminal state) and 3 quarantined
    assert {(r["terminal_state"], r["n"]) for r in ledger} == {(None, 2), ("quarantined", 3)}
    # the four copies' claims are all held against the one attempt that is graded (none is `not_admitted`)
    assert len(audited) == 5 and {a["attempt_id"] for a in audited} == {first, kept[1]["attempt_id"]}
    assert {a["audit_reason"] for a in audited} == {"no_grade"}

    assert cli.main(["quarantine", "--reason", "duplicate_attempt"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert sorted(ln.split("\t")[0] for ln in listed) == sorted(copies - {kept[0]["o"]})  # the corpus's file:line
    assert cli.main(["lineage", kept[0]["o"]]) == 0  # an admitted row, by its corpus file:line
    text = capsys.readouterr().out
    assert f"raw attempt   {first}" in text and f"(imported from {kept[0]['o']})" in text
    assert cli.main(["lineage", repeats[0]["import_origin"]]) == 0
    assert f"duplicate_attempt: {repeats[0]['attempt_id']} at {repeats[0]['import_origin']}" in capsys.readouterr().out


def _descendants(pid: int) -> set[int]:
    """Live (not zombie) processes below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    left = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            left.add(p)
    return left


def _stop_and_time(proc: subprocess.Popen, tree: set[int], limit_s: float) -> float:
    """SIGTERM `proc`; seconds until it and every process of `tree` are gone (fails past `limit_s`)."""
    import signal
    import time

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    while (proc.poll() is None or _alive(tree)) and time.monotonic() - started < limit_s:
        time.sleep(0.1)
    left = _alive(tree)
    for p in left:  # do not leak them into the rest of the session
        os.kill(p, 9)
    assert proc.poll() is not None and not left, f"still alive {limit_s}s after SIGTERM: {proc.pid}, {left}"
    return time.monotonic() - started


def test_a_stubborn_process_group_is_stopped_whole(tmp_path):
    """pipelines/cli/supervise.py: children that ignore SIGINT and SIGTERM (as `dg dev` does when started in the
    background) are killed with their group a few seconds after we are told to stop."""
    import time

    from pipelines.cli import supervise

    script = "trap '' INT TERM; sleep 300 & sleep 300 & wait"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from pipelines.cli.supervise import run_group; "
                             f"sys.exit(run_group(['sh', '-c', {script!r}], cwd='.'))"], cwd=REPO_ROOT)
    deadline = time.monotonic() + 20
    while len(_descendants(proc.pid)) < 3 and time.monotonic() < deadline:  # sh and its two sleeps
        time.sleep(0.05)
    tree = _descendants(proc.pid)
    assert len(tree) == 3
    took = _stop_and_time(proc, tree, supervise.GRACE_S + 2 * supervise.KILL_WAIT_S + 3)
    assert proc.returncode == 0 and took > supervise.GRACE_S  # it was asked first, and killed only then


@pytest.mark.slow
def test_kerneltraj_ui_stops_whole_on_sigterm(tmp_path):
    """From the release issue: after SIGTERM, `kerneltraj ui`'s processes were still alive 12 s later. Started
    the way a service manager or `&` starts it (SIGINT ignored), every process of it is gone within seconds."""
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = project_env(tmp_path, ())
    log = (tmp_path / "ui.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ui", "--port", str(port)], env=env,
                            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2).read()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "ui.log").read_text()[-3000:]
            time.sleep(0.5)
    tree = _descendants(proc.pid)
    assert len(tree) >= 3, tree  # dg dev, the webserver, the daemon (and code servers)
    assert _stop_and_time(proc, tree, 12) < 10
    assert proc.returncode == 0
