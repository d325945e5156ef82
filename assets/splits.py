"""Stage 6, held-out-family splits: the frozen manifest under <repo>/splits/ and the leakage report.

The split logic lives in pipelines.curation.split_policy (policy, assignment, freezing) and pipelines.curation.leakage
(the checks); this asset only runs them against the catalogue and the attempts, and stores the
result so the release and the ledger can use it.
"""

from pathlib import Path
import dagster as dg
from dagster import AssetExecutionContext

from assets.common import quality_gate, GROUP_CURATION, OWNER, check_result, table_metadata
from grader.catalogue import load_catalogue
from pipelines.curation.families import catalogue_tasks
from pipelines.curation.leakage import CodeItem, leakage_report
from pipelines.defs.resources import AttemptSources, ReleaseTarget, Warehouse
from pipelines.curation.split_policy import DEFAULT_POLICY, build_manifest, freeze, load_frozen
from pipelines.core.warehouse import insert_rows, load_sql, markdown_table, query_dicts, run_script, transaction


@dg.asset(
    deps=["raw_attempts"],
    group_name=GROUP_CURATION,
    owners=[OWNER],
    kinds={"python", "duckdb"},
    code_version="1",
    description="Every task assigned to train / validation / test_heldout by the versioned split policy "
                "(held-out families and lineages, shape variants split as one workload), frozen as "
                "split_manifest-<version>.json; plus the leakage report (task in two splits, near-duplicate "
                "code across splits, lineage or held-out family across splits, shape variants across splits).",
)
def family_splits(context: AssetExecutionContext, warehouse: Warehouse, release_target: ReleaseTarget,
                  attempt_sources: AttemptSources) -> dg.MaterializeResult:
    cards = load_catalogue(extra=[Path(p) for p in attempt_sources.task_files]).values()
    tasks = catalogue_tasks(cards)
    directory = Path(release_target.splits_dir)
    # freeze() refuses a build that would move an already-frozen task: that failure stops the release.
    path = freeze(build_manifest(DEFAULT_POLICY, tasks), directory)
    manifest = load_frozen(directory, DEFAULT_POLICY.version)
    run_id = context.run.run_id
    with warehouse.connect() as con:
        code = [CodeItem(r["attempt_id"], r["task_id"], r["source"])
                for r in query_dicts(con, load_sql("splits.attempt_sources"))]
        findings = leakage_report(manifest, tasks, code)
        rows = [{"task_id": r.task_id, "family": r.family, "lineage": r.lineage, "workload_key": r.workload_key,
                 "split": r.split.value, "split_version": manifest.version,
                 "manifest_sha256": manifest.content_hash, "run_id": run_id} for r in manifest.rows]
        found = [{"kind": f.check.value, "key": f.key, "detail": f.detail, "split_version": manifest.version,
                  "run_id": run_id} for f in findings]
        with transaction(con):
            run_script(con, "splits.clear")
            insert_rows(con, "split_manifest", rows)
            insert_rows(con, "leakage_findings", found)
        counts = query_dicts(con, load_sql("splits.split_counts"))
        md = table_metadata(con, "split_manifest", load_sql("splits.preview"),
                            manifest=dg.MetadataValue.path(str(path)),
                            split_version=dg.MetadataValue.text(manifest.version),
                            manifest_sha256=dg.MetadataValue.text(manifest.content_hash),
                            splits=dg.MetadataValue.md(markdown_table(counts)),
                            leakage_findings=dg.MetadataValue.int(len(found)))
    context.log.info(f"split manifest {path} ({len(rows)} tasks), {len(found)} leakage findings")
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=family_splits, blocking=True,
                description="Every attempted task has exactly one row in the frozen manifest.")
def every_attempted_task_split(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        return check_result(query_dicts(con, load_sql("splits.unassigned_tasks")), "attempted tasks without one split")


@dg.asset_check(asset=family_splits, blocking=True,
                description="The leakage report is empty: no task in two splits, no near-duplicate code across "
                            "splits, no held-out lineage or family outside test_heldout, no shape variant across "
                            "splits.")
def no_split_leakage(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        return check_result(query_dicts(con, load_sql("splits.findings")), "leakage findings")


CHECKS = [every_attempted_task_split, no_split_leakage, quality_gate(family_splits, "splits")]
