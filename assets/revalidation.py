"""Stage 4, revalidated records: a second, independent grade of every graded attempt.

The recheck uses its own grader service (fresh workers) and a seed derived from the attempt id
that differs from the primary pass's. Both grades get a three-way label with a confidence
interval (grader.labels: faster / slower / tie, `ambiguous` when the interval straddles a tie
band edge, never forced). Only records whose two grades agree on status and a definite label are
marked revalidated; false speedup labels (faster first, definitely not faster on recheck) are
counted; agreement is also reported per task, so many candidates of one task do not dominate.
"""

import datetime as dt

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import quality_gate, GROUP_GRADING, OWNER, check_result, counts_md, table_metadata
from assets.grading import grade_checks
from grader.labels import TIE_BAND_LOG2
from pipelines.grading.agreement import record_labels, record_problems, summarise, unit_verdicts
from pipelines.grading.backend import GradingBackend
from pipelines.grading.passes import PASS_REVALIDATION, grade_pending
from pipelines.defs.resources import Warehouse
from pipelines.core.warehouse import load_sql, markdown_table, query_dicts, run_script, transaction

@dg.asset(
    deps=["graded_attempts"],
    group_name=GROUP_GRADING,
    owners=[OWNER],
    kinds={"python", "duckdb", "pytorch"},
    code_version="2",
    pool="gpu",
    description="An isolated recheck of every graded attempt (fresh grader workers, a new seed derived from the "
                "attempt id); three-way labels faster/slower/tie with a confidence interval (tie band |log2 "
                f"speedup| < {TIE_BAND_LOG2}; an interval across a band edge is `ambiguous`, never forced); only "
                "records whose two grades agree are marked revalidated; false speedup labels are counted; "
                "agreement is reported per record and per task.",
)
def revalidated_records(context: AssetExecutionContext, regrader: GradingBackend,
                        warehouse: Warehouse) -> dg.MaterializeResult:
    started = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    summary = grade_pending(regrader, warehouse, PASS_REVALIDATION, context.run.run_id, context.log.info)
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "revalidation.rebuild", {"tie_band": TIE_BAND_LOG2, "run_id": context.run.run_id})
            # One device per recheck service (the grading resource grades on device 0 or the CPU).
            run_script(con, "revalidation.record_run", {
                "run_id": context.run.run_id, "started_at": started, "wall_s": summary["elapsed_s"],
                "graded_now": summary["graded_now"], "resumed": summary["resumed"], "devices": 1})
        s = query_dicts(con, load_sql("revalidation.summary"))[0]
        confusion = query_dicts(con, load_sql("revalidation.confusion"))
        rows = query_dicts(con, load_sql("revalidation.records"))
        per_task = summarise(unit_verdicts(
            ((r["attempt_id"], r["task_id"], record_labels(r)[0]) for r in rows),
            ((r["attempt_id"], r["task_id"], record_labels(r)[1]) for r in rows)))
        md = table_metadata(
            con, "revalidated_records", load_sql("revalidation.preview"),
            revalidated=dg.MetadataValue.int(int(s["revalidated"])),
            disagreements=dg.MetadataValue.int(int(s["disagreements"])),
            ambiguous_near_ties=dg.MetadataValue.int(int(s["ambiguous_near_ties"])),
            false_speedup_labels=dg.MetadataValue.int(int(s["false_speedup_labels"])),
            fast_unconfirmed=dg.MetadataValue.int(int(s["fast_unconfirmed"])),
            agreement_rate=dg.MetadataValue.float(round(s["revalidated"] / s["records"], 4) if s["records"] else 0.0),
            agreement_rate_by_task=dg.MetadataValue.float(round(per_task.agree_rate_by_task or 0.0, 4)),
            tasks=dg.MetadataValue.int(per_task.tasks),
            label_confusion=dg.MetadataValue.md(markdown_table(confusion)),
            regraded_this_run=dg.MetadataValue.int(summary["graded_now"]),
            resumed_without_regrade=dg.MetadataValue.int(summary["resumed"]),
            tie_band_log2=dg.MetadataValue.float(TIE_BAND_LOG2),
            status_counts_this_run=counts_md(summary["by_status_now"], "status"),
        )
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=revalidated_records, blocking=True,
                description="Labels, intervals, agreement and the revalidated flag recomputed in Python "
                            "(pipelines.grading.agreement) from the two grades' per-size timings match the SQL-built "
                            "table; only agreeing records are revalidated.")
def labels_and_agreement_consistent(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        rows = query_dicts(con, load_sql("revalidation.records"))
        unpaired = query_dicts(con, load_sql("revalidation.unpaired"))
    bad = [{"attempt_id": r["attempt_id"], "fields": ", ".join(p)} for r in rows if (p := record_problems(r))]
    bad += [{"attempt_id": u["attempt_id"], "fields": "no current primary + recheck grade pair"} for u in unpaired]
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
