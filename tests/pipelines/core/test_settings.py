"""Settings: one reader of the KERNELTRAJ_* variables; paths from the state folder, never from the source tree;
the embedded demo corpus only while nothing else is given."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.core import import_registry as reg
from pipelines.core.settings import Settings, demo_dir
from tests.conftest import REPO_ROOT


def test_state_lives_where_the_command_starts_not_in_the_source_tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = Settings.from_env({})
    assert s.state_dir == tmp_path / ".kerneltraj"
    assert s.warehouse_path == s.state_dir / "warehouse.duckdb"
    assert s.releases_dir == s.state_dir / "releases" and s.splits_dir == s.state_dir / "splits"


def test_relative_paths_in_variables_are_taken_from_the_starting_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = Settings.from_env({"KERNELTRAJ_STATE_DIR": "st", "KERNELTRAJ_INPUTS": "a.jsonl", "KERNELTRAJ_SPLITS": "sp"})
    assert s.state_dir == tmp_path / "st" and s.splits_dir == tmp_path / "sp"
    assert s.inputs == (str(tmp_path / "a.jsonl"),)


def test_the_demo_corpus_is_the_default_only_while_nothing_was_imported(tmp_path):
    state = tmp_path / "state"
    demo = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(state)})
    assert [Path(p).name for p in demo.inputs] == ["attempts.jsonl", "malformed.jsonl"]
    assert all(Path(p).is_file() and Path(p).parent == demo_dir() for p in demo.inputs)
    assert all(Path(p).is_file() for p in demo.checkpoints)

    entry, _ = reg.record(state, "cuda-l1", [tmp_path / "h100.jsonl"],
                          {"attempts": [{"attempt_id": "cuda-l1:h100:L1:T1", "task_id": "kb_1"}], "tasks": []})
    imported = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(state)})
    assert imported.inputs == (entry.files["attempts"],)  # replaces the demo, never joins it

    given = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(state), "KERNELTRAJ_INPUTS": str(tmp_path / "x.jsonl")})
    assert given.inputs == (str(tmp_path / "x.jsonl"),)


def test_a_state_folder_given_on_the_command_line_brings_its_own_imports(tmp_path, monkeypatch):
    """`kerneltraj --state-dir X` reads X's imports, warehouse and releases, not the environment's folder's."""
    default, other = tmp_path / "default", tmp_path / "other"
    reg.record(default, "cuda-l1", [tmp_path / "a100.jsonl"], {"attempts": [], "tasks": []})
    entry, _ = reg.record(other, "cuda-l1", [tmp_path / "h100.jsonl"], {"attempts": [], "tasks": []})
    monkeypatch.setenv("KERNELTRAJ_STATE_DIR", str(default))
    monkeypatch.setenv("KERNELTRAJ_WAREHOUSE", str(default / "elsewhere.duckdb"))
    s = Settings.from_env_with(state_dir=str(other))
    assert s.state_dir == other and s.inputs == (entry.files["attempts"],)
    assert s.task_files and all(Path(f).is_relative_to(other) for f in s.task_files)
    assert s.warehouse_path == other / "warehouse.duckdb" and s.releases_dir == other / "releases"
    assert Settings.from_env_with(str(other), str(tmp_path / "w.duckdb")).warehouse_path == tmp_path / "w.duckdb"


def test_path_env_round_trips_the_state_paths(tmp_path):
    s = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path / "a"), "KERNELTRAJ_WAREHOUSE": str(tmp_path / "w.db")})
    again = Settings.from_env(s.path_env())
    assert (again.state_dir, again.warehouse_path, again.releases_dir, again.splits_dir) == (
        s.state_dir, s.warehouse_path, s.releases_dir, s.splits_dir)


HANDOFFS = {"KERNELTRAJ_CONFINE", "KERNELTRAJ_WORKER_CONFIG"}
"""Not settings: a grading parent's message to its own child process (the confinement it must enter, a fresh
worker's configuration), set by the parent and popped by the child before candidate code runs."""


def _named_variables(path: Path) -> set[str]:
    """Every KERNELTRAJ_* variable a module could read or set: a string that is one name alone (a key of the
    environment), or a keyword argument (prose that mentions a variable, in a help text or docstring, is not)."""
    import ast
    import re

    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            names |= {node.value} if re.fullmatch(r"KERNELTRAJ_[A-Z0-9_]+", node.value) else set()
        elif isinstance(node, ast.keyword) and (node.arg or "").startswith("KERNELTRAJ_"):
            names.add(node.arg)
    return names


def test_settings_is_the_one_reader_of_the_kerneltraj_variables():
    """No module of the product but the settings module names a KERNELTRAJ_* variable (the grader's compile cache
    too: the pipeline passes it to GraderService), save the two hand-offs between a grading parent and its
    children; and every variable the README tells a user about is one the settings read."""
    import re

    settings = REPO_ROOT / "pipelines" / "core" / "settings.py"
    elsewhere = {str(p.relative_to(REPO_ROOT)): _named_variables(p) - HANDOFFS
                 for pkg in ("grader", "pipelines", "assets", "bench") for p in (REPO_ROOT / pkg).rglob("*.py")
                 if p != settings}
    assert {p: n for p, n in elsewhere.items() if n} == {}
    read = _named_variables(settings)
    assert not read & HANDOFFS
    documented = set(re.findall(r"KERNELTRAJ_[A-Z0-9_]+", (REPO_ROOT / "README.md").read_text()))
    assert documented <= read, documented - read


def test_the_compile_cache_setting_reaches_the_grading_backend(tmp_path):
    from pipelines.defs.resources import backend_from

    s = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path), "KERNELTRAJ_COMPILE_CACHE": "off"})
    assert s.compile_cache == "off" and backend_from(s).compile_cache == "off"
    assert backend_from(s, revalidation=True).compile_cache == "off"
    assert Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path)}).compile_cache == ""


def test_the_replay_settings_reach_the_release_jobs_config_and_an_unknown_one_is_named(tmp_path):
    from pipelines.core.settings import SettingsError
    from pipelines.defs.definitions import RELEASE_JOB, build_defs, release_run_config

    s = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path),
                           "KERNELTRAJ_REPLAY_SETTINGS": " compute_hog,isolated"})
    assert s.replay_settings == ("compute_hog", "isolated")
    config = {"ops": {"contention_replay": {"config": {"settings": ["compute_hog", "isolated"]}}}}
    assert release_run_config(s) == config
    assert build_defs(s).resolve_job_def(RELEASE_JOB).run_config == config  # the launchpad starts from it
    everything = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path)})
    assert everything.replay_settings == () and release_run_config(everything) == {}
    assert not build_defs(everything).resolve_job_def(RELEASE_JOB).run_config
    wrong = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path), "KERNELTRAJ_REPLAY_SETTINGS": "isolated,latency"})
    with pytest.raises(SettingsError, match=r"names 'latency', .*isolated, compute_hog, membw_hog, time_sliced"):
        build_defs(wrong)
