"""Great Expectations gate run on every published table before a release.

One suite per table, built from a small table of rules; validated on pandas frames in an ephemeral
GX context (nothing written to disk). great_expectations takes seconds to import, so it is imported
inside the functions that need it, never at module import.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from grader.contract import REWARD_FLOOR, SPEEDUP_CLIP, Status
from pipelines.reporting.release_card import REVALIDATION_STATES, REWARD_KINDS
from pipelines.curation.split_policy import Split

if TYPE_CHECKING:
    import pandas

SEALED_COLUMNS = ("hidden_sizes", "expert", "expert_source")
"""Sealed task data (GRADER.md 1): a published table carrying a column of this name fails the gate."""

LINEAGE_COLUMNS = ("task_revision", "grader_version", "fingerprint_id")
"""Every published record names the task revision, grader and hardware that produced it."""

REWARD_MAX = math.log2(SPEEDUP_CLIP[1])
"""Largest possible reward: log2 of the speedup clip (3.0)."""

CORRECT_REWARD_MIN = math.log2(SPEEDUP_CLIP[0])
"""Smallest reward a correct grade can earn: log2 of the lower speedup clip (-6.0)."""

NOT_GRADED_HERE = tuple(s.value for s in Status if not s.is_candidate_fault)
"""Statuses of an attempt the grader could not judge (no CUDA device, a grader failure): published with a
NULL reward (sql/release.sql), never the floor, which says the candidate was at fault."""


@dataclass(frozen=True)
class TableRules:
    """What the gate demands of one published table."""

    non_null: tuple[str, ...]
    """Columns that must exist and hold no nulls."""
    unique: tuple[str, ...] = ()
    """Columns whose values must be unique."""
    unique_together: tuple[tuple[str, ...], ...] = ()
    """Column groups whose combined values must be unique (the table's row key)."""
    value_sets: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(column, allowed values) for closed vocabularies other than the grade status."""
    graded: tuple[tuple[str, str], ...] = ()
    """(status column, reward column) pairs checked against the closed status set and the reward rules
    (the reward is NULL exactly when the status is one of NOT_GRADED_HERE)."""
    reward_range: tuple[str, ...] = ()
    """Other reward-valued columns (aggregates): within [floor, max reward]."""
    non_negative: tuple[str, ...] = ()
    """Counts and turn numbers: >= 0."""
    nested: tuple[tuple[str, str], ...] = ()
    """(list-of-struct column, rules name): each element becomes a row, validated with those rules."""
    min_rows: int = 1
    """Fewest rows a publishable table may have."""


_PASSES = ("primary", "revalidation")
_PROVENANCE = (("reward_kind", REWARD_KINDS), ("revalidation_state", REVALIDATION_STATES))
"""What a published reward says about itself (sql/rewards.sql): closed vocabularies wherever it is published."""

TABLE_RULES: dict[str, TableRules] = {
    "graded_attempts": TableRules(
        non_null=("attempt_id", "grading_pass", "task_id", "status", *LINEAGE_COLUMNS),
        unique_together=(("attempt_id", "grading_pass"),), value_sets=(("grading_pass", _PASSES), *_PROVENANCE),
        graded=(("status", "reward"),)),
    "trajectories": TableRules(
        non_null=("trajectory_id", "n_turns", "turns", "grader_version"), unique=("trajectory_id",),
        reward_range=("best_reward",), non_negative=("n_turns",), nested=(("turns", "trajectory_turns"),)),
    "trajectory_turns": TableRules(
        non_null=("trajectory_id", "turn", "attempt_id", "status"), unique=("attempt_id",),
        unique_together=(("trajectory_id", "turn"),), non_negative=("turn",), value_sets=_PROVENANCE,
        graded=(("status", "reward"),)),
    "revalidated_records": TableRules(
        non_null=("attempt_id", "task_id", "primary_status", *LINEAGE_COLUMNS),
        unique=("attempt_id",), min_rows=0,  # a small run may have no record that survived its recheck
        value_sets=_PROVENANCE,
        graded=(("primary_status", "primary_reward"), ("revalidation_status", "revalidation_reward"))),
    "split_manifest": TableRules(
        non_null=("task_id", "split"), unique=("task_id",), value_sets=(("split", tuple(s.value for s in Split)),)),
}
"""Rules per table, matching the published columns (sql/schema.sql, sql/release.sql)."""

TABLE_ALIASES = {"grades": "graded_attempts", "revalidated": "revalidated_records", "splits": "split_manifest"}
"""Release config names (sql/release.sql) accepted for the tables they publish."""

PUBLISHED_TABLES = ("graded_attempts", "trajectories", "revalidated_records", "split_manifest")
"""Tables with a suite of their own (trajectory_turns is checked as part of trajectories)."""


@dataclass(frozen=True)
class QualityReport:
    """Outcome of one table's suite."""

    table: str
    """Published table name."""
    success: bool
    """True when every expectation passed."""
    evaluated: int
    """Number of expectations evaluated."""
    failed: list[tuple[str, str | None, str]]
    """(expectation type, column or None for table-level ones, what was observed) per failure."""


_gx_lock = threading.RLock()
_sealed_expectation: Any = None


def _sealed_columns_expectation() -> Any:
    """The custom table-level expectation class (GX registers a class once per process)."""
    global _sealed_expectation
    with _gx_lock:
        if _sealed_expectation is None:
            from great_expectations.expectations.expectation import BatchExpectation

            class ExpectTableToHaveNoSealedColumns(BatchExpectation):
                """Expect none of the sealed column names among the table's columns."""

                sealed: list[str]
                metric_dependencies = ("table.columns",)
                success_keys = ("sealed",)
                domain_keys = ("batch_id",)

                def _validate(self, metrics: dict, runtime_configuration: dict | None = None,
                              execution_engine: Any = None) -> dict:
                    present = sorted(set(metrics["table.columns"]) & set(self.sealed))
                    return {"success": not present, "result": {"observed_value": present}}

            _sealed_expectation = ExpectTableToHaveNoSealedColumns
        return _sealed_expectation


def build_suite(rules_name: str, columns: list[str]) -> Any:
    """The GX suite for one set of rules; column-level checks are added only for columns that exist
    (the existence checks fail for missing ones), so a missing column is reported once, plainly."""
    import great_expectations as gx
    from great_expectations import expectations as E
    from great_expectations.expectations.row_conditions import Column

    rules = TABLE_RULES[rules_name]
    present = set(columns)
    suite = gx.ExpectationSuite(name=f"kerneltraj.{rules_name}")
    add = suite.add_expectation
    add(_sealed_columns_expectation()(sealed=list(SEALED_COLUMNS)))
    if rules.min_rows:
        add(E.ExpectTableRowCountToBeBetween(min_value=rules.min_rows))
    for col in rules.non_null:
        add(E.ExpectColumnToExist(column=col))
        if col in present:
            add(E.ExpectColumnValuesToNotBeNull(column=col))
    for col in rules.unique:
        if col in present:
            add(E.ExpectColumnValuesToBeUnique(column=col))
    for group in rules.unique_together:
        if set(group) <= present:
            add(E.ExpectCompoundColumnsToBeUnique(column_list=list(group)))
    for col, allowed in rules.value_sets:
        if col in present:
            add(E.ExpectColumnValuesToBeInSet(column=col, value_set=list(allowed)))
    for col in rules.non_negative:
        if col in present:
            add(E.ExpectColumnValuesToBeBetween(column=col, min_value=0))
    for col in rules.reward_range:
        if col in present:
            add(E.ExpectColumnValuesToBeBetween(column=col, min_value=REWARD_FLOOR, max_value=REWARD_MAX))
    for status, reward in rules.graded:
        if not {status, reward} <= present:
            continue
        add(E.ExpectColumnValuesToBeInSet(column=status, value_set=[s.value for s in Status]))
        add(E.ExpectColumnValuesToBeBetween(column=reward, min_value=REWARD_FLOOR, max_value=REWARD_MAX))
        # not graded here: no reward at all; graded: a reward, from one of the reward function's two branches
        add(E.ExpectColumnValuesToBeNull(column=reward, row_condition=Column(status).is_in(list(NOT_GRADED_HERE))))
        add(E.ExpectColumnValuesToNotBeNull(column=reward,
                                            row_condition=Column(status).is_not_in(list(NOT_GRADED_HERE))))
        # the floor for anything not correct, a clipped log2 otherwise
        add(E.ExpectColumnValuesToBeInSet(column=reward, value_set=[REWARD_FLOOR], row_condition=Column(status)
                                          .is_not_in([Status.CORRECT.value, *NOT_GRADED_HERE])))
        add(E.ExpectColumnValuesToBeBetween(column=reward, min_value=CORRECT_REWARD_MIN, max_value=REWARD_MAX,
                                            row_condition=Column(status) == Status.CORRECT.value))
    return suite


def validate_table(table_name: str, df: "pandas.DataFrame") -> QualityReport:
    """Run the table's suite on a pandas frame in an ephemeral GX context; nothing is written to disk.

    List-of-struct columns (trajectories.turns) are flattened to one row per element and checked with
    their own rules; their failures name the column as `turns.<field>`.
    """
    import pandas as pd

    name = TABLE_ALIASES.get(table_name, table_name)
    if name not in PUBLISHED_TABLES:
        raise ValueError(f"no quality suite for table {table_name!r}; known: {sorted(PUBLISHED_TABLES)}")
    evaluated, failed = _run_suite(name, df)
    for column, rules_name in TABLE_RULES[name].nested:
        if column in df.columns and "trajectory_id" in df.columns:
            flat = pd.DataFrame([{"trajectory_id": owner, **dict(item)}
                                 for owner, items in zip(df["trajectory_id"], df[column])
                                 for item in (list(items) if items is not None else [])])
            n, nested_failed = _run_suite(rules_name, flat)
            evaluated += n
            failed += [(exp, f"{column}.{col}" if col else column, detail) for exp, col, detail in nested_failed]
    return QualityReport(table=name, success=not failed, evaluated=evaluated, failed=failed)


def _run_suite(rules_name: str, df: "pandas.DataFrame") -> tuple[int, list[tuple[str, str | None, str]]]:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")  # no usage events leave the machine
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    with _gx_lock:  # GX keeps its "current context" in a process global: one validation at a time
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        suite = build_suite(rules_name, [str(c) for c in df.columns])
        asset = context.data_sources.add_pandas("frames").add_dataframe_asset(name=rules_name)
        batch = asset.add_batch_definition_whole_dataframe("whole").get_batch(batch_parameters={"dataframe": df})
        result = batch.validate(suite, result_format="SUMMARY")
    failed = [(r.expectation_config.type, r.expectation_config.kwargs.get("column"), _detail(r))
              for r in result.results if not r.success]
    return len(result.results), failed


def _detail(r: Any) -> str:
    info = r.exception_info or {}
    if info.get("raised_exception"):
        return f"raised: {str(info.get('exception_message'))[:300]}"
    if r.expectation_config.type == "expect_column_to_exist":
        return "column is missing"
    res = r.result or {}
    condition = r.expectation_config.kwargs.get("row_condition")
    if isinstance(condition, dict):  # serialised Condition: {"column": {"name": ..}, "operator": .., "parameter": ..}
        condition = f"{(condition.get('column') or {}).get('name')} {condition.get('operator')} " \
                    f"{condition.get('parameter')!r}"
    where = f" where {condition}" if condition else ""
    if "unexpected_count" in res:
        return (f"{res['unexpected_count']} unexpected value(s){where}, e.g. "
                f"{list(res.get('partial_unexpected_list') or [])[:5]}")
    return f"observed {res.get('observed_value')!r}"
