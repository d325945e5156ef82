"""The release's published form, without running the pipeline: per-turn and per-grade measurement and revalidation
state (sql/release.sql on a small real warehouse), the quality gate's rule for rewards not graded here, and the card's
column descriptions and licences (pipelines/reporting/dataset_card.yaml, pipelines/reporting/release_card.py).

The same properties are checked on a real release, loaded from a local Hub, in
tests/pipelines/publishing/test_publish.py.
"""
from __future__ import annotations

import io
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from pipelines.publishing.release_files import CONFIGS, SPLIT_CONFIGS, dataset_card
from grader.contract import GRADER_VERSION, Status
from pipelines.core.markup import card_body
from pipelines.defs.quality import NOT_GRADED_HERE, validate_table
from pipelines.reporting.release_card import (REVALIDATION_STATES, annotate_parquet, card_spec, column_problems,
                                              describe, licences, notice_text)
from pipelines.core.warehouse import connect, insert_rows, load_sql, query_dicts, run_script, transaction

C, W, U, I = (Status.CORRECT.value,  # noqa: E741 - the statuses' initials, as in the tables below
              Status.WRONG_OUTPUT.value, Status.UNSUPPORTED_ON_BACKEND.value,
              Status.INFRA_ERROR.value)

# (attempt, primary status, reward, device, fingerprint kind, recheck status, recheck reward, recheck agreement)
TURNS = [
    ("a-confirmed", C, 0.4, "NVIDIA H200", "cuda", C, 0.38, "agree"),
    ("a-ambiguous", C, -4.26, "NVIDIA H200", "cuda", C, -5.78, "ambiguous"),
    ("a-disagreed", W, -24.0, "cpu", "cpu", C, 3.0, "disagree"),
    ("a-cpu", C, 3.0, "cpu", "cpu", C, 3.0, "agree"),
    ("a-recheck-failed", C, 1.0, "cpu", "cpu", I, -24.0, "missing"),
    ("a-unsupported", U, -24.0, "cpu", "cpu", None, None, None),
]
WANT = {  # attempt -> (reward, reward_kind, backend, revalidation_state, recheck_reward)
    "a-confirmed": (0.4, "log2_speedup_vs_expert", "cuda", "confirmed", 0.38),
    "a-ambiguous": (-4.26, "log2_speedup_vs_expert", "cuda", "ambiguous", -5.78),
    "a-disagreed": (-24.0, "floor", "cpu", "disagreed", 3.0),
    "a-cpu": (3.0, "cpu_timing_not_a_speedup", "cpu", "confirmed", 3.0),
    "a-recheck-failed": (1.0, "cpu_timing_not_a_speedup", "cpu", "recheck_failed", None),
    "a-unsupported": (None, "not_graded_here", "cpu", "not_rechecked", None),
}


def _grade(aid: str, grading_pass: str, status: str, reward: float, device: str, kind: str) -> dict:
    return {"attempt_id": aid, "grading_pass": grading_pass, "task_id": "t", "task_revision": "rev1",
            "grader_version": GRADER_VERSION, "source_sha256": f"sha-{aid}", "fingerprint_id": f"fp-{kind}",
            "status": status, "reason_code": status, "reward": reward, "device": device}


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict[str, list[dict]]:
    """Every published config with a reward or an attempt's outcome, from a real warehouse (sql/schema.sql, its
    views, the ledger and the macros of sql/rewards.sql) holding one trajectory with every case of TURNS."""
    db = tmp_path_factory.mktemp("published") / "w.duckdb"
    with connect(db) as con, transaction(con):
        run_script(con, "grading.set_version", {"grader_version": GRADER_VERSION})
        insert_rows(con, "tasks", [{"task_id": "t", "task_revision": "rev1"}])
        insert_rows(con, "split_manifest", [{"task_id": "t", "split": "train", "split_version": "v1"}])
        insert_rows(con, "fingerprints", [{"fingerprint_id": f"fp-{k}", "fingerprint": json.dumps({"kind": k})}
                                          for k in ("cuda", "cpu")])
        insert_rows(con, "raw_attempts", [{"attempt_id": t[0], "task_id": "t", "trajectory_id": "traj", "turn": i,
                                           "source_sha256": f"sha-{t[0]}", "origin": f"in.jsonl:{i}"}
                                          for i, t in enumerate(TURNS, 1)])
        grades, records = [], []
        for aid, status, reward, device, kind, rstatus, rreward, agreement in TURNS:
            grades.append(_grade(aid, "primary", status, reward, device, kind))
            if rstatus:
                grades.append(_grade(aid, "revalidation", rstatus, rreward, device, kind))
                records.append({"attempt_id": aid, "task_id": "t", "task_revision": "rev1",
                                "grader_version": GRADER_VERSION, "fingerprint_id": f"fp-{kind}",
                                "revalidation_fingerprint_id": f"fp-{kind}", "primary_status": status,
                                "revalidation_status": rstatus, "primary_reward": reward,
                                "revalidation_reward": rreward, "agreement": agreement,
                                "revalidated": agreement == "agree", "agree": agreement == "agree"})
        insert_rows(con, "graded_attempts", grades)
        insert_rows(con, "revalidated_records", records)
        items = [{"turn": i, "attempt_id": t[0], "status": t[1], "reward": t[2]} for i, t in enumerate(TURNS, 1)]
        con.execute("INSERT INTO trajectories (trajectory_id, task_id, agent, model, n_turns, turns, "
                    "first_correct_turn, grader_version) VALUES ('traj', 't', 'ag', 'm', ?, ?, 1, ?)",
                    [len(items), items, GRADER_VERSION])
        return {c: query_dicts(con, load_sql(f"release.{c}")) for c in ("trajectories", "grades", "revalidated",
                                                                        "attempts")}


@pytest.fixture
def turns(published) -> dict[str, dict]:
    """The published turns of the one trajectory, by attempt id."""
    [rec] = published["trajectories"]
    assert rec["split"] == "train" and rec["n_turns"] == len(TURNS)
    assert rec["rewards"] == [t["reward"] for t in rec["turns"]] and rec["best_reward"] == 3.0
    return {t["attempt_id"]: t for t in rec["turns"]}


def test_every_turn_says_where_it_was_measured_and_whether_the_recheck_confirmed_it(turns):
    got = {a: (t["reward"], t["reward_kind"], t["backend"], t["revalidation_state"], t["recheck_reward"])
           for a, t in turns.items()}
    assert got == WANT
    assert {t["revalidation_state"] for t in turns.values()} == set(REVALIDATION_STATES)
    assert turns["a-confirmed"]["device"] == "NVIDIA H200" and turns["a-cpu"]["device"] == "cpu"


def test_every_published_reward_says_the_same_of_its_attempt(published):
    """Not only the turns: each grade (primary and recheck), each revalidated record and each attempt says where
    its reward was measured and whether the primary reward survived the recheck, as the turns do."""
    primary = {g["attempt_id"]: g for g in published["grades"] if g["grading_pass"] == "primary"}
    assert {a: (g["reward"], g["reward_kind"], g["backend"], g["revalidation_state"]) for a, g in primary.items()} \
        == {a: w[:4] for a, w in WANT.items()}
    rechecks = {g["attempt_id"]: g for g in published["grades"] if g["grading_pass"] == "revalidation"}
    assert {a: (g["reward"], g["reward_kind"], g["revalidation_state"]) for a, g in rechecks.items()} == {
        a: (w[4], "not_graded_here" if w[4] is None else ("floor" if w[4] == -24 else "cpu_timing_not_a_speedup"
                                                          if WANT[a][2] == "cpu" else "log2_speedup_vs_expert"), w[3])
        for a, w in WANT.items() if a in rechecks}
    revalidated = {r["attempt_id"]: r for r in published["revalidated"]}
    assert {a: (r["primary_reward"], r["reward_kind"], r["primary_backend"], r["revalidation_state"],
                r["revalidation_reward"]) for a, r in revalidated.items()} == {
        a: w for a, w in WANT.items() if a != "a-unsupported"}
    assert revalidated["a-confirmed"]["revalidation_device"] == "NVIDIA H200"
    assert {a["attempt_id"]: a["revalidation_state"] for a in published["attempts"]} == {
        a: w[3] for a, w in WANT.items()}


def test_sql_not_graded_statuses_are_the_graders():
    """Each `IN (...)` list of sql/release.sql and sql/rewards.sql that nulls a reward names exactly the statuses
    the grader does not blame on the candidate (grader.contract Status.is_candidate_fault)."""
    text = load_sql("release") + load_sql("rewards")
    lists = re.findall(r"IN \(('[a-z_]+'(?:, '[a-z_]+')*)\)", text)
    not_graded = [set(re.findall(r"'([a-z_]+)'", x)) for x in lists if "unsupported_on_backend" in x]
    assert len(not_graded) >= 3
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
