"""Stage 2, graded attempts: every admitted attempt graded once per grader version and task revision
(pipelines.grading.passes runs the pass).

Grading resumes: attempts that already hold a grade for the same source, task revision, grader
version and pass are skipped, and results are committed in small batches so a killed run keeps
everything graded before it died.
"""

from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_GRADING, OWNER, check_result, counts_md, picture, quality_gate, table_metadata
from grader.contract import GRADER_VERSION, REWARD_FLOOR, Status
from pipelines.core.warehouse import load_sql, query_dicts
from pipelines.defs.resources import Warehouse
from pipelines.grading.backend import GradingBackend
from pipelines.grading.passes import PASS_PRIMARY, grade_pending, reward_problems
from pipelines.reporting.plots import reward_vs_speed_figures, reward_vs_speed_png


@dg.asset(
    deps=["raw_attempts"],
    group_name=GROUP_GRADING,
    owners=[OWNER],
    kinds={"python", "duckdb", "pytorch"},
    code_version="1",
    pool="gpu",
    description="Every admitted attempt graded by the sealed grader (public + hidden sizes, expert timed in the "
                "same run). Resumes: attempts already graded under this grader version and task revision are "
                "not graded again.",
)
def graded_attempts(context: AssetExecutionContext, grader: GradingBackend,
                    warehouse: Warehouse) -> dg.MaterializeResult:
    summary = grade_pending(grader, warehouse, PASS_PRIMARY, context.run.run_id, context.log.info)
    with warehouse.connect() as con:
        by_status = {r["status"]: r["n"] for r in query_dicts(con, load_sql("grading.status_counts"),
                                                              {"grading_pass": PASS_PRIMARY})}
        md = table_metadata(con, "graded_attempts", load_sql("grading.preview"),
                            grader_version=dg.MetadataValue.text(GRADER_VERSION),
                            graded_this_run=dg.MetadataValue.int(summary["graded_now"]),
                            resumed_without_regrade=dg.MetadataValue.int(summary["resumed"]),
                            grading_seconds_this_run=dg.MetadataValue.float(round(summary["elapsed_s"], 2)),
                            status_counts=counts_md(by_status, "status"))
        points = query_dicts(con, load_sql("grading.reward_vs_speed"), {"grading_pass": PASS_PRIMARY})
    md["reward_vs_speed"] = picture(context, "reward_vs_speed", reward_vs_speed_png(points), "reward against speed")
    md.update({k: dg.MetadataValue.float(v) for k, v in reward_vs_speed_figures(points).items()})
    # This asset's rows are the current primary grades (the table also keeps history and the recheck).
    md["dagster/row_count"] = dg.MetadataValue.int(sum(by_status.values()))
    return dg.MaterializeResult(metadata=md)


def grade_checks(asset: Any, grading_pass: str, prefix: str) -> list:
    """The invariants every grading pass must hold, as blocking checks on the asset that wrote it."""

    @dg.asset_check(asset=asset, name=f"{prefix}cheats_at_floor", blocking=True,
                    description="Every planted cheat (extra.intended starts with 'cheat:') is at reward "
                                f"{REWARD_FLOOR} with status cheat_flagged or wrong_output.")
    def cheats_at_floor(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            cheats = query_dicts(con, load_sql("grading.cheats"), {"grading_pass": grading_pass})
        bad = [c for c in cheats if not (c["reward"] == REWARD_FLOOR
                                         and c["status"] in (Status.CHEAT_FLAGGED.value, Status.WRONG_OUTPUT.value))]
        return check_result(bad, "planted cheats above the floor", cheats_checked=dg.MetadataValue.int(len(cheats)))

    @dg.asset_check(asset=asset, name=f"{prefix}reward_matches_status", blocking=True,
                    description="Each reward equals the contract's reward function applied to the grade's status "
                                "and per-size speedups (floor unless correct).")
    def reward_matches_status(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            grades = query_dicts(con, load_sql("grading.rewards"), {"grading_pass": grading_pass})
        return check_result(reward_problems(grades), "grades whose reward disagrees with their status",
                            grades_checked=len(grades))

    @dg.asset_check(asset=asset, name=f"{prefix}lineage_keys_present", blocking=True,
                    description="Every grade carries attempt_id, task_revision, grader_version and a fingerprint_id "
                                "that resolves to a stored hardware fingerprint.")
    def lineage_keys_present(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            bad = query_dicts(con, load_sql("grading.missing_lineage"), {"grading_pass": grading_pass})
        return check_result(bad, "grades missing a lineage key")

    @dg.asset_check(asset=asset, name=f"{prefix}every_attempt_graded", blocking=True,
                    description="Every attempt due for this pass holds exactly one current grade for it.")
    def every_attempt_graded(warehouse: Warehouse) -> dg.AssetCheckResult:
        with warehouse.connect() as con:
            bad = query_dicts(con, load_sql(f"grading.ungraded_{grading_pass}"))
        return check_result(bad, "attempts without exactly one current grade")

    return [cheats_at_floor, reward_matches_status, lineage_keys_present, every_attempt_graded]


CHECKS = [*grade_checks(graded_attempts, PASS_PRIMARY, ""), quality_gate(graded_attempts, "grades")]
