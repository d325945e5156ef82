"""Stage 4, revalidated records: a second, independent grade of every graded attempt.

The recheck uses its own grader service (fresh workers), a seed derived from the attempt id that
differs from the primary pass's, and a three-way label on the reward. Only records whose two
grades agree on status and label are marked revalidated; flips across the tie band are flagged.
"""

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import quality_gate, GROUP_GRADING, OWNER, check_result, counts_md, table_metadata
from assets.grading import PASS_REVALIDATION, grade_checks, grade_pending
from grader.contract import Status
from grader.labels import TIE_BAND_LOG2, point_label
from pipelines.resources import GradingBackend, Warehouse
from pipelines.warehouse import load_sql, markdown_table, query_dicts, run_script, transaction

def speed_label(status: str, reward: float | None) -> str | None:
    """faster / slower / tie for a correct grade (reward = log2 speedup), None otherwise (one tie band:
    grader.labels)."""
    if status != Status.CORRECT.value or reward is None:
        return None
    return point_label(reward)


@dg.asset(
    deps=["graded_attempts"],
    group_name=GROUP_GRADING,
    owners=[OWNER],
    kinds={"python", "duckdb", "pytorch"},
    code_version="1",
    pool="gpu",
    description="An isolated recheck of every graded attempt (fresh grader workers, a new seed derived from the "
                f"attempt id); three-way labels faster/slower/tie (tie band |log2 speedup| < {TIE_BAND_LOG2}); "
                "only records whose two grades agree are marked revalidated; near-tie flips are flagged.",
)
def revalidated_records(context: AssetExecutionContext, regrader: GradingBackend,
                        warehouse: Warehouse) -> dg.MaterializeResult:
    summary = grade_pending(context, regrader, warehouse, PASS_REVALIDATION)
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "revalidation.rebuild", {"tie_band": TIE_BAND_LOG2, "run_id": context.run.run_id})
        s = query_dicts(con, load_sql("revalidation.summary"))[0]
        confusion = query_dicts(con, load_sql("revalidation.confusion"))
        md = table_metadata(
            con, "revalidated_records", load_sql("revalidation.preview"),
            revalidated=dg.MetadataValue.int(int(s["revalidated"])),
            disagreements=dg.MetadataValue.int(int(s["disagreements"])),
            ambiguous_near_ties=dg.MetadataValue.int(int(s["ambiguous_near_ties"])),
            false_speedup_labels=dg.MetadataValue.int(int(s["false_speedup_labels"])),
            agreement_rate=dg.MetadataValue.float(round(s["revalidated"] / s["records"], 4) if s["records"] else 0.0),
            label_confusion=dg.MetadataValue.md(markdown_table(confusion)),
            regraded_this_run=dg.MetadataValue.int(summary["graded_now"]),
            resumed_without_regrade=dg.MetadataValue.int(summary["resumed"]),
            tie_band_log2=dg.MetadataValue.float(TIE_BAND_LOG2),
            status_counts_this_run=counts_md(summary["by_status_now"], "status"),
        )
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=revalidated_records, blocking=True,
                description="Labels, agreement and the revalidated flag recomputed in Python from the two grades "
                            "match the table; only agreeing records are revalidated.")
def labels_and_agreement_consistent(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        rows = query_dicts(con, load_sql("revalidation.records"))
    bad = []
    for r in rows:
        pl = speed_label(r["primary_status"], r["primary_reward"])
        vl = speed_label(r["revalidation_status"], r["revalidation_reward"])
        agree = r["primary_status"] == r["revalidation_status"] and pl == vl
        near_tie = (r["primary_status"] == r["revalidation_status"] == Status.CORRECT.value
                    and pl != vl and "tie" in (pl, vl))
        want = {"primary_label": pl, "revalidation_label": vl, "agree": agree, "revalidated": agree,
                "ambiguous_near_tie": near_tie, "false_speedup_label": pl == "faster" and vl != "faster"}
        diff = [k for k, v in want.items() if r[k] != v]
        if diff:
            bad.append({"attempt_id": r["attempt_id"], "fields": ", ".join(diff)})
    return check_result(bad, "records whose labels or flags disagree with their grades", records_checked=len(rows))


@dg.asset_check(asset=revalidated_records, blocking=True,
                description="The recheck is independent: its seed differs from the primary grade's seed.")
def recheck_seed_independent(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        rows = query_dicts(con, load_sql("revalidation.records"))
    bad = [{"attempt_id": r["attempt_id"], "seed": r["primary_seed"]} for r in rows
           if r["primary_seed"] == r["revalidation_seed"]]
    return check_result(bad, "rechecks that reused the primary seed")


CHECKS = [labels_and_agreement_consistent, recheck_seed_independent,
          *grade_checks(revalidated_records, PASS_REVALIDATION, "revalidation_"),
          quality_gate(revalidated_records, "revalidated")]
