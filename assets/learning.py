"""Stage 6b, the learning comparison: did training on our data help on families the model never saw?

Attempts of a baseline and a treatment checkpoint (same declared budget per task) are graded by
the same sealed grader as the release and scored by pipelines.curation.checkpoint_comparison on the held-out families of
the frozen split manifest: fast_p and mean reward with task-level bootstrap intervals and a verdict.
"""

import json
from pathlib import Path

import dagster as dg
import polars as pl
from dagster import AssetExecutionContext

from assets.common import GROUP_CURATION, OWNER
from grader.catalogue import load_catalogue
from pipelines.curation.checkpoint_comparison import GRADE_SEED, checkpoint_attempts, compare_checkpoints
from pipelines.core.settings import Settings
from pipelines.grading.backend import GradingBackend
from pipelines.defs.resources import ReleaseTarget, Warehouse
from pipelines.curation.split_policy import DEFAULT_POLICY, load_frozen
from pipelines.core.warehouse import insert_rows, load_sql, query_dicts, run_script, transaction

def checkpoint_files() -> list[Path]:
    """The checkpoint attempt files the settings name (KERNELTRAJ_CHECKPOINTS, read in one place)."""
    return [Path(p) for p in Settings.from_env().checkpoints]


@dg.asset(
    deps=["family_splits"],
    group_name=GROUP_CURATION,
    owners=[OWNER],
    kinds={"python", "duckdb", "pytorch"},
    code_version="1",
    pool="gpu",
    description="Baseline vs treatment checkpoint attempts (matched declared budgets) graded by the sealed grader "
                "and scored on the held-out families of the frozen split manifest: fast_p at p = 0, 1, 1.5, 2 "
                "and mean reward, task-level paired bootstrap 95% intervals, verdict improved / regressed / "
                "inconclusive (a family whose mean-reward interval lies below 0 makes it regressed).",
)
def learning_comparison(context: AssetExecutionContext, grader: GradingBackend, warehouse: Warehouse,
                        release_target: ReleaseTarget) -> dg.MaterializeResult:
    cards = load_catalogue()
    attempts = checkpoint_attempts(checkpoint_files(), cards)
    by_id = {a.attempt_id: a for a in attempts}
    requests = [grader.request(a.attempt_id, a.task_id, a.source, a.language, a.entry_point, seed=GRADE_SEED)
                for a in attempts]
    rows = []
    for outcome in grader.grade(requests):
        r, a = outcome.result, by_id[outcome.result.attempt_id]
        rows.append({"attempt_id": a.attempt_id, "checkpoint": a.extra.get("checkpoint"), "task_id": a.task_id,
                     "family": cards[a.task_id].family, "status": r.status.value, "reward": r.reward,
                     "speedup": r.speedup_geomean, "budget_tokens": a.generation_budget_tokens,
                     "run_id": context.run.run_id})
    manifest = load_frozen(Path(release_target.splits_dir), DEFAULT_POLICY.version)
    result = compare_checkpoints(pl.DataFrame(rows), manifest)
    with warehouse.connect() as con:
        run_script(con, "learning.create")
        with transaction(con):
            run_script(con, "learning.clear")
            insert_rows(con, "checkpoint_grades", rows)
            insert_rows(con, "learning_comparison", [{
                "manifest_version": manifest.version, "verdict": result.verdict.value,
                "result_json": json.dumps(result.to_dict(), default=str), "run_id": context.run.run_id}])
    context.log.info(f"learning comparison on {result.n_tasks} held-out tasks: {result.verdict.value}")
    return dg.MaterializeResult(metadata={
        "verdict": dg.MetadataValue.text(result.verdict.value),
        "regressed_families": dg.MetadataValue.text(", ".join(result.regressed_families) or "none"),
        "held_out_tasks_scored": dg.MetadataValue.int(result.n_tasks),
        "report": dg.MetadataValue.md(result.to_markdown()),
        "dagster/row_count": dg.MetadataValue.int(len(rows)),
    })


@dg.asset_check(asset=learning_comparison,
                description="Both checkpoints were scored on at least one held-out task with matched budgets "
                            "(an empty comparison proves nothing).")
def comparison_has_tasks(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        run_script(con, "learning.create")
        latest = query_dicts(con, load_sql("learning.latest"))
    n = json.loads(latest[0]["result_json"])["n_tasks"] if latest else 0
    return dg.AssetCheckResult(passed=n > 0, metadata={"held_out_tasks_scored": n})


CHECKS = [comparison_has_tasks]
