"""The release's published form, without running the pipeline: per-turn measurement and revalidation state
(sql/release.sql on a small DuckDB), the quality gate's rule for rewards not graded here, and the card's
column descriptions and licences (pipelines/dataset_card.yaml, pipelines/release_card.py).

The same properties are checked on a real release, loaded from a local Hub, in tests/test_publish.py.
"""
from __future__ import annotations

import io
import re

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from assets.release import CONFIGS, SPLIT_CONFIGS, dataset_card
from grader.contract import Status
from pipelines.markup import card_body
from pipelines.quality import NOT_GRADED_HERE, validate_table
from pipelines.release_card import (REVALIDATION_STATES, annotate_parquet, card_spec, column_problems, describe,
                                    licences, notice_text)
from pipelines.warehouse import load_sql

C, W, U, I = (Status.CORRECT.value, Status.WRONG_OUTPUT.value, Status.UNSUPPORTED_ON_BACKEND.value,
              Status.INFRA_ERROR.value)

# (attempt, primary status, reward, device, fingerprint kind, ledger terminal state, recheck status, recheck reward)
TURNS = [
    ("a-confirmed", C, 0.4, "NVIDIA H200", "cuda", "revalidated", C, 0.38),
    ("a-ambiguous", C, -4.26, "NVIDIA H200", "cuda", "ambiguous", C, -5.78),
    ("a-disagreed", W, -24.0, "cpu", "cpu", "disagreed", C, 3.0),
    ("a-cpu", C, 3.0, "cpu", "cpu", "revalidated", C, 3.0),
    ("a-recheck-failed", C, 1.0, "cpu", "cpu", "recheck_infra_error", I, -24.0),
    ("a-unsupported", U, -24.0, "cpu", "cpu", "unsupported_on_backend", None, None),
]
DDL = """
CREATE TABLE trajectories (trajectory_id VARCHAR, task_id VARCHAR, agent VARCHAR, model VARCHAR, n_turns INTEGER,
    turns STRUCT(turn INTEGER, attempt_id VARCHAR, status VARCHAR, reward DOUBLE)[], first_correct_turn INTEGER,
    grader_version VARCHAR);
CREATE TABLE current_grades (attempt_id VARCHAR, grading_pass VARCHAR, device VARCHAR, fingerprint_id VARCHAR);
CREATE TABLE fingerprints (fingerprint_id VARCHAR, fingerprint JSON);
CREATE TABLE ledger (ledger_source VARCHAR, attempt_id VARCHAR, terminal_state VARCHAR);
CREATE TABLE revalidated_records (attempt_id VARCHAR, revalidation_status VARCHAR, revalidation_reward DOUBLE);
CREATE TABLE split_manifest (task_id VARCHAR, split VARCHAR, split_version VARCHAR);
"""


@pytest.fixture
def turns() -> dict[str, dict]:
    """The published turns of one trajectory holding every case of TURNS, by attempt id."""
    con = duckdb.connect()
    con.execute(DDL)
    con.execute("INSERT INTO split_manifest VALUES ('t', 'train', 'v1')")
    con.execute("INSERT INTO fingerprints VALUES (?, ?), (?, ?)",
                ["fp-cuda", '{"kind": "cuda"}', "fp-cpu", '{"kind": "cpu"}'])
    for aid, status, reward, device, kind, state, rstatus, rreward in TURNS:
        con.execute("INSERT INTO current_grades VALUES (?, 'primary', ?, ?)", [aid, device, f"fp-{kind}"])
        con.execute("INSERT INTO ledger VALUES ('raw', ?, ?)", [aid, state])
        if rstatus:
            con.execute("INSERT INTO revalidated_records VALUES (?, ?, ?)", [aid, rstatus, rreward])
    items = [{"turn": i, "attempt_id": t[0], "status": t[1], "reward": t[2]} for i, t in enumerate(TURNS)]
    con.execute("INSERT INTO trajectories VALUES ('traj', 't', 'ag', 'm', ?, ?, 0, '0.6.0')", [len(items), items])
    row = con.execute(load_sql("release.trajectories")).fetchall()
    cols = [d[0] for d in con.description]
    rec = dict(zip(cols, row[0]))
    assert rec["split"] == "train" and rec["n_turns"] == len(TURNS)
    assert rec["rewards"] == [t["reward"] for t in rec["turns"]] and rec["best_reward"] == 3.0
    return {t["attempt_id"]: t for t in rec["turns"]}


def test_every_turn_says_where_it_was_measured_and_whether_the_recheck_confirmed_it(turns):
    want = {  # attempt -> (reward, reward_kind, backend, revalidation_state, recheck_reward)
        "a-confirmed": (0.4, "log2_speedup_vs_expert", "cuda", "confirmed", 0.38),
        "a-ambiguous": (-4.26, "log2_speedup_vs_expert", "cuda", "ambiguous", -5.78),
        "a-disagreed": (-24.0, "floor", "cpu", "disagreed", 3.0),
        "a-cpu": (3.0, "cpu_timing_not_a_speedup", "cpu", "confirmed", 3.0),
        "a-recheck-failed": (1.0, "cpu_timing_not_a_speedup", "cpu", "recheck_failed", None),
        "a-unsupported": (None, "not_graded_here", "cpu", "not_rechecked", None),
    }
    got = {a: (t["reward"], t["reward_kind"], t["backend"], t["revalidation_state"], t["recheck_reward"])
           for a, t in turns.items()}
    assert got == want
    assert {t["revalidation_state"] for t in turns.values()} == set(REVALIDATION_STATES)
    assert turns["a-confirmed"]["device"] == "NVIDIA H200" and turns["a-cpu"]["device"] == "cpu"


def test_sql_not_graded_statuses_are_the_graders():
    """Each `IN (...)` list of sql/release.sql that nulls a reward names exactly the statuses the grader does
    not blame on the candidate (grader.contract Status.is_candidate_fault)."""
    text = load_sql("release")
    lists = re.findall(r"IN \(('[a-z_]+'(?:, '[a-z_]+')*)\)", text)
    not_graded = [set(re.findall(r"'([a-z_]+)'", x)) for x in lists if "unsupported_on_backend" in x]
    assert len(not_graded) >= 6
    assert all(s == set(NOT_GRADED_HERE) for s in not_graded), not_graded
    assert set(NOT_GRADED_HERE) == {s.value for s in Status if not s.is_candidate_fault}


def _turn_frame(status: str, reward: float | None):
    turns = [[{"turn": 1, "attempt_id": "a-1", "status": status, "reward": reward}]]
    table = pa.table({"trajectory_id": ["traj"], "task_id": ["t"], "n_turns": [1], "turns": turns,
                      "rewards": [[reward]], "best_reward": [reward], "grader_version": ["0.6.0"]})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return pq.read_table(io.BytesIO(buf.getvalue())).to_pandas()


@pytest.mark.parametrize("status,reward,ok", [(U, None, True), (I, None, True), (U, -24.0, False),
                                               (C, None, False), (W, None, False), (W, -24.0, True)])
def test_quality_gate_wants_a_null_reward_exactly_when_not_graded_here(status, reward, ok):
    report = validate_table("trajectories", _turn_frame(status, reward))
    assert report.success is ok, report.failed
    if not ok:
        assert any(col == "turns.reward" for _, col, _ in report.failed), report.failed


def test_every_declared_column_and_turn_field_is_described():
    spec = card_spec()
    assert list(spec["configs"]) == list(CONFIGS)
    for config, cols in spec["columns"].items():
        assert column_problems(config, list(cols)) == []
        if config in SPLIT_CONFIGS:
            assert "split" in cols, config
    assert all(spec["turn_fields"].values())
    assert set(spec["turn_fields"]) >= {"backend", "device", "revalidation_state", "reward_kind"}
    for name, j in spec["json_columns"].items():
        assert name in spec["columns"][j["config"]], name
    assert column_problems("grades", ["attempt_id", "no_such_column"])  # an undeclared column is refused


def test_parquet_fields_carry_their_descriptions(tmp_path):
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({c: [None] for c in card_spec()["columns"]["ledger"]}), path)
    annotate_parquet(path, "ledger", 16)
    schema = pq.read_schema(path)
    assert {f.name: f.metadata[b"description"].decode() for f in schema} == {
        f.name: describe("ledger", f.name) for f in schema}
    pq.write_table(pa.table({"surprise": [1]}), path)
    with pytest.raises(ValueError, match="differ"):
        annotate_parquet(path, "ledger", 16)


def test_licences_follow_the_sources_present():
    facts = {"grader_version": "0.6.0", "sources": ["cuda-l1", "kernelbench", "kerneltraj", "flashinfer-bench"]}
    front = yaml.safe_load(dataset_card("v1.0.0", "r", {"attempts": 1}, facts).split("---\n")[1])
    assert front["license"] == ["apache-2.0", "mit"]
    only_ours = yaml.safe_load(dataset_card("v1.0.0", "r", {}, {"sources": ["kerneltraj"]}).split("---\n")[1])
    assert only_ours["license"] == "apache-2.0"
    rows = {r["source"]: r["license"] for r in licences(["cuda-l1", "flashinfer-bench", "my-lab"])}
    assert rows == {"kerneltraj": "apache-2.0", "cuda-l1": "mit", "flashinfer-bench": "apache-2.0", "my-lab": "other"}
    notice = notice_text(["flashinfer-bench"])
    assert "Copyright (c) 2025 by FlashInfer-Bench Contributors" in notice
    assert "FlashInfer-Bench" not in notice_text(["cuda-l1"]) and "ShannonAI" in notice_text(["cuda-l1"])
    body = card_body(dataset_card("v1.0.0", "r", {}, facts))
    assert "Copyright (c) 2023 Anne Ouyang" in body and "NOTICE of FlashInfer-Bench" in body


def test_card_states_the_reward_range_from_the_contract():
    body = card_body(dataset_card("v1.0.0", "r", {}, {"backends": ["cpu"]}))
    assert "in\n  [-6, 3] when the kernel is correct" in body and "-24 (the floor)" in body
    assert "CPU release: its speed rewards are not speedups" in body
    assert "CPU release" not in card_body(dataset_card("v1.0.0", "r", {}, {"backends": ["cuda"]}))
