"""Settings: one reader of the KERNELTRAJ_* variables; paths from the state folder, never from the source tree;
the embedded demo corpus only while nothing else is given."""
from __future__ import annotations

from pathlib import Path

from pipelines.core import import_registry as reg
from pipelines.core.settings import Settings, demo_dir


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


def test_path_env_round_trips_the_state_paths(tmp_path):
    s = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(tmp_path / "a"), "KERNELTRAJ_WAREHOUSE": str(tmp_path / "w.db")})
    again = Settings.from_env(s.path_env())
    assert (again.state_dir, again.warehouse_path, again.releases_dir, again.splits_dir) == (
        s.state_dir, s.warehouse_path, s.releases_dir, s.splits_dir)
