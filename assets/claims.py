"""Claim audit: each speedup an imported corpus claims, against our primary grade of the same attempt.

The logic (what is compared with what, and why) is in `pipelines.reporting.claim_audit`, the report for a reader
in `pipelines.reporting.claim_report`; this module reads the claims files and writes the `claim_audit` table.
"""

from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_GRADING, OWNER, check_result, picture, table_metadata
from pipelines.reporting import claim_audit as cl
from pipelines.reporting.claim_report import audit_png, report_markdown
from pipelines.defs.resources import AttemptSources, Warehouse
from pipelines.core.warehouse import load_sql, query_dicts, scalar, transaction

WORST = 10


def claim_files(attempt_sources: AttemptSources) -> list[Path]:
    return cl.claim_files_beside(Path(p) for p in attempt_sources.paths)


@dg.asset(
    deps=["raw_attempts", "graded_attempts"],
    group_name=GROUP_GRADING,
    owners=[OWNER],
    kinds={"python", "duckdb"},
    code_version="1",
    description="Every speedup an imported corpus claims (CUDA-L1 per GPU, KernelBench eval results) held "
                "against our primary grade of the same attempt: reproduced, refuted (status kept), ambiguous "
                "(CI straddles the tie band, another GPU, another baseline) or not graded (counted, never dropped).",
)
def claim_audit(context: AssetExecutionContext, warehouse: Warehouse,
                attempt_sources: AttemptSources) -> dg.MaterializeResult:
    files = claim_files(attempt_sources)
    rows = cl.read_claims(files, context.run.run_id)
    with warehouse.connect() as con:
        with transaction(con):
            n = cl.audit(con, rows, context.run.run_id)
        s = cl.summary(con, worst=WORST)
        points = query_dicts(con, load_sql("claims.points"))
        md = table_metadata(con, "claim_audit", None, claims_files=dg.MetadataValue.json([str(f) for f in files]))
    context.log.info(f"claim audit: {n} claims from {len(files)} file(s)")
    md["report"] = dg.MetadataValue.md(report_markdown(s))
    md["claimed_vs_measured"] = picture(context, "claimed_vs_measured", audit_png(points), "claimed against measured")
    md["comparable_by_class"] = dg.MetadataValue.json(s["comparable_by_class"])
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=claim_audit, blocking=True,
                description="Every claim line of every claims file has exactly one audit row with a class.")
def every_claim_audited(warehouse: Warehouse, attempt_sources: AttemptSources) -> dg.AssetCheckResult:
    lines = sum(1 for f in claim_files(attempt_sources) for ln in f.read_bytes().split(b"\n") if ln.strip())
    with warehouse.connect() as con:
        audited = int(scalar(con, "SELECT count(*) FROM claim_audit WHERE audit_class IS NOT NULL"))
        distinct = int(scalar(con, "SELECT count(DISTINCT claim_id) FROM claim_audit"))
    bad = [] if lines == audited == distinct else [{"claim_lines": lines, "audit_rows": audited,
                                                     "distinct_claim_ids": distinct}]
    return check_result(bad, "claims files whose lines and audit rows differ")


CHECKS = [every_claim_audited]
