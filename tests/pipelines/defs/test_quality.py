"""The Great Expectations gate: passes clean published tables, names the expectation a planted fault breaks.

Frames follow the published columns (sql/schema.sql, sql/release.sql) and go through a parquet round
trip, so nested columns (trajectories.turns) arrive exactly as a release reads them.
"""
from __future__ import annotations

import io
from typing import Any, Callable

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from grader.contract import Status
from pipelines.defs.quality import PUBLISHED_TABLES, SEALED_COLUMNS, TABLE_RULES, validate_table

LINEAGE = {"task_revision": "rev-3f2a", "grader_version": "0.3.0", "fingerprint_id": "fp-cpu-01"}
C, W, T = Status.CORRECT.value, Status.WRONG_OUTPUT.value, Status.TIMEOUT.value


def via_parquet(columns: dict[str, list[Any]]) -> pd.DataFrame:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns), buf)
    return pq.read_table(io.BytesIO(buf.getvalue())).to_pandas()


def graded() -> dict[str, list[Any]]:
    ids = ["att-0", "att-1", "att-2", "att-0", "att-3"]
    return {"attempt_id": ids, "grading_pass": ["primary"] * 3 + ["revalidation", "primary"],
            "task_id": ["gelu_fp32"] * 5, "status": [C, W, C, C, T], "reason_code": ["ok", "mismatch", "ok", "ok", "t"],
            "reward": [0.27, -24.0, -3.7, 0.25, -24.0], **{k: [v] * 5 for k, v in LINEAGE.items()}}


def trajectories() -> dict[str, list[Any]]:
    turns = [[{"turn": 0, "attempt_id": "att-1", "status": W, "reward": -24.0},
              {"turn": 1, "attempt_id": "att-0", "status": C, "reward": 0.27}],
             [{"turn": 0, "attempt_id": "att-2", "status": C, "reward": -3.7}]]
    return {"trajectory_id": ["traj-0", "traj-1"], "task_id": ["gelu_fp32"] * 2, "n_turns": [2, 1], "turns": turns,
            "rewards": [[-24.0, 0.27], [-3.7]], "best_reward": [0.27, -3.7], "first_correct_turn": [1, 0],
            "grader_version": ["0.3.0"] * 2}


def revalidated() -> dict[str, list[Any]]:
    return {"attempt_id": ["att-0", "att-2"], "task_id": ["gelu_fp32"] * 2, **{k: [v] * 2 for k, v in LINEAGE.items()},
            "revalidation_fingerprint_id": ["fp-cpu-01"] * 2, "primary_status": [C, C], "revalidation_status": [C, W],
            "primary_reward": [0.27, -3.7], "revalidation_reward": [0.25, -24.0], "agree": [True, False],
            "trajectory_id": ["traj-0", "traj-1"], "turn": [1, 0]}


def splits() -> dict[str, list[Any]]:
    return {"task_id": ["gelu_fp32", "row_sum_fp32", "matmul_fp16"], "family": ["activation", "reduction", "gemm"],
            "lineage": ["kerneltraj/gelu", "kerneltraj/row_sum", "kerneltraj/matmul"],
            "split": ["train", "validation", "test_heldout"], "split_version": ["s1"] * 3}


GOOD = {"graded_attempts": graded, "trajectories": trajectories, "revalidated_records": revalidated,
        "split_manifest": splits}


def test_every_published_table_has_a_suite() -> None:
    assert set(GOOD) == set(PUBLISHED_TABLES) and set(PUBLISHED_TABLES) <= set(TABLE_RULES)


@pytest.mark.parametrize("table", sorted(GOOD))
def test_clean_tables_pass(table: str) -> None:
    report = validate_table(table, via_parquet(GOOD[table]()))
    assert report.success, report.failed
    assert report.failed == [] and report.evaluated >= 6


def changed(make: Callable[[], dict[str, list[Any]]], **updates: Any) -> Callable[[], dict[str, list[Any]]]:
    return lambda: {**make(), **updates}


def _turns_with(**fields: Any) -> list[list[dict[str, Any]]]:
    turns = trajectories()["turns"]
    turns[1][0] = {**turns[1][0], **fields}
    return turns


# Single planted faults: (case, table, frame, expectation that must fail, column it must name)
BAD_CASES = [
    ("floored status with positive reward", "graded_attempts", changed(graded, reward=[0.27, 1.5, -3.7, 0.25, -24.0]),
     "expect_column_values_to_be_in_set", "reward"),
    ("duplicate attempt_id", "revalidated_records", changed(revalidated, attempt_id=["att-0", "att-0"]),
     "expect_column_values_to_be_unique", "attempt_id"),
    ("one attempt in two trajectories", "trajectories", changed(trajectories, turns=_turns_with(attempt_id="att-1")),
     "expect_column_values_to_be_unique", "turns.attempt_id"),
    ("hidden_sizes column", "graded_attempts", changed(graded, hidden_sizes=["M=127,N=33"] * 5),
     "expect_table_to_have_no_sealed_columns", None),
]


@pytest.mark.parametrize("case,table,make,expectation,column", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_planted_fault_fails_naming_the_expectation(case, table, make, expectation, column) -> None:
    report = validate_table(table, via_parquet(make()))
    assert report.success is False, case
    assert any(exp == expectation and col == column for exp, col, _ in report.failed), report.failed
    if expectation == "expect_table_to_have_no_sealed_columns":
        detail = next(d for exp, _, d in report.failed if exp == expectation)
        assert any(s in detail for s in SEALED_COLUMNS), detail


# Several independent faults per frame (fewer GX runs, each fault on rows/columns of its own):
# (table, frame, every (expectation, column) that must be reported)
MULTI_FAULT_CASES = [
    ("graded_attempts", lambda: {k: v for k, v in changed(
        graded,
        status=[C, "passed", C, C, T],                                  # status outside the closed set
        reward=[-24.0, -24.0, 3.5, 0.25, -24.0],                        # correct at the floor; above the clip
        grading_pass=["primary", "primary", "primary", "recheck", "primary"],   # unknown pass
        attempt_id=["att-0", "att-1", "att-1", "att-0", "att-3"],       # att-1 twice in the primary pass
    )().items() if k != "task_revision"},                               # lineage column dropped
     [("expect_column_values_to_be_in_set", "status"), ("expect_column_values_to_be_between", "reward"),
      ("expect_column_values_to_be_in_set", "grading_pass"), ("expect_compound_columns_to_be_unique", None),
      ("expect_column_to_exist", "task_revision")]),
    ("revalidated_records", changed(revalidated, fingerprint_id=[None, "fp-cpu-01"],   # lineage null
                                    revalidation_reward=[0.25, 0.5],                   # floored recheck, reward > floor
                                    expert=["def run(x): ..."] * 2),                   # sealed expert source
     [("expect_column_values_to_not_be_null", "fingerprint_id"),
      ("expect_column_values_to_be_in_set", "revalidation_reward"), ("expect_table_to_have_no_sealed_columns", None)]),
    ("trajectories", changed(trajectories, best_reward=[3.5, -3.7], turns=[
        [{"turn": 0, "attempt_id": "att-1", "status": W, "reward": -24.0},     # turn 0 twice in traj-0
         {"turn": 0, "attempt_id": "att-0", "status": C, "reward": 0.27}],
        [{"turn": 0, "attempt_id": "att-2", "status": T, "reward": -3.7}]]),   # floored turn, reward > floor
     [("expect_column_values_to_be_between", "best_reward"), ("expect_compound_columns_to_be_unique", "turns"),
      ("expect_column_values_to_be_in_set", "turns.reward")]),
    ("split_manifest", changed(splits, split=["train", "holdout", "test_heldout"], hidden_sizes=["N=1000"] * 3),
     [("expect_column_values_to_be_in_set", "split"), ("expect_table_to_have_no_sealed_columns", None)]),
]


@pytest.mark.parametrize("table,make,expected", MULTI_FAULT_CASES, ids=[c[0] for c in MULTI_FAULT_CASES])
def test_every_planted_fault_is_named(table, make, expected) -> None:
    report = validate_table(table, via_parquet(make()))
    assert report.success is False
    named = {(exp, col) for exp, col, _ in report.failed}
    assert set(expected) <= named, report.failed


def test_release_config_names_are_accepted() -> None:
    assert validate_table("grades", via_parquet(graded())).table == "graded_attempts"


def test_unknown_table_is_refused() -> None:
    with pytest.raises(ValueError, match="no quality suite"):
        validate_table("raw_attempts", via_parquet(graded()))
