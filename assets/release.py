"""Stage 8, release: parquet per published table plus a dataset card, written atomically
(pipelines.publishing.release_files lays the folder out)."""
import datetime as dt
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_RELEASE, OWNER, check_result
from grader.catalogue import load_catalogue
from pipelines.core.markup import card_body
from pipelines.core.warehouse import load_sql, query_dicts, run_script, transaction
from pipelines.defs.resources import AttemptSources, ReleaseTarget, Warehouse
from pipelines.publishing.release_files import (CONFIGS, RELEASE_VERSION, column_types, config_shards, dataset_card,
                                                export_configs, lineage_problems, release_facts, sealed_problems,
                                                shard_problems, swap_into_place)
from pipelines.reporting.release_card import notice_text, split_table
from pipelines.reporting.revalidation_report import dataset_card_section


@dg.asset(
    deps=["accounting", "trajectories", "revalidated_records", "revalidation_report", "family_splits"],
    group_name=GROUP_RELEASE,
    owners=[OWNER],
    kinds={"parquet", "duckdb"},
    code_version="2",
    description="A versioned dataset release: one parquet shard per config and a dataset card pinning the "
                "grader version, task revisions, hardware and the full attempt accounting. Sealed fields "
                "(hidden sizes, expert source) are never written.",
)
def release(context: AssetExecutionContext, warehouse: Warehouse, release_target: ReleaseTarget,
            attempt_sources: AttemptSources) -> dg.MaterializeResult:
    version = release_target.version
    if not RELEASE_VERSION.match(version):
        raise ValueError(f"release version {version!r} must match {RELEASE_VERSION.pattern}")
    run_id = context.run.run_id
    parent = Path(release_target.releases_dir)
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / version
    staging = parent / f".{version}.staging-{run_id[:8]}"
    if staging.exists():
        shutil.rmtree(staging)
    catalogue = load_catalogue(extra=[Path(p) for p in attempt_sources.task_files])
    try:
        with warehouse.connect() as con:
            split_rows = export_configs(con, staging)
            facts = release_facts(con)
            revalidation_md = dataset_card_section(con)
        rows = {c: sum(per.values()) for c, per in split_rows.items()}
        (staging / "README.md").write_text(dataset_card(version, run_id, rows, facts, revalidation_md,
                                                        split_rows=split_rows, types=column_types(staging),
                                                        root=staging))
        (staging / "NOTICE").write_text(notice_text(facts["sources"]))
        leaks = sealed_problems(staging, catalogue)
        if leaks:
            raise RuntimeError(f"sealed data reached the release; nothing published: {leaks[:5]}")
        swap_into_place(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    digest = hashlib.sha256(b"".join(p.read_bytes() for c in CONFIGS for p in config_shards(final, c))).hexdigest()
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    with warehouse.connect() as con, transaction(con):
        run_script(con, "release.forget", {"version": version})
        run_script(con, "release.record", {"version": version, "path": str(final), "run_id": run_id,
                                           "created_at": now, "configs": json.dumps(rows)})
    context.log.info(f"release {version} written to {final}")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(sum(rows.values())),
        "path": dg.MetadataValue.path(str(final)),
        "version": dg.MetadataValue.text(version),
        "content_sha256": dg.MetadataValue.text(digest),
        "preview": dg.MetadataValue.md(split_table(rows, split_rows)),
        "dataset_card": dg.MetadataValue.md(card_body((final / "README.md").read_text())),
    })


def _latest_release(warehouse: Warehouse) -> dict[str, Any] | None:
    with warehouse.connect() as con:
        latest = query_dicts(con, load_sql("release.latest"))
    return latest[0] if latest else None


@dg.asset_check(asset=release, blocking=True,
                description="Every split shard of every config exists and holds as many rows as that split of its "
                            "warehouse query; no row's task is outside the split manifest.")
def release_matches_warehouse(warehouse: Warehouse) -> dg.AssetCheckResult:
    latest = _latest_release(warehouse)
    if latest is None:
        return check_result([{"problem": "no release recorded"}], "missing releases")
    with warehouse.connect() as con:
        bad = shard_problems(con, Path(latest["path"]))
    return check_result(bad, "configs whose shard does not match the warehouse", version=latest["version"])


@dg.asset_check(asset=release, blocking=True,
                description="No sealed field (hidden size keys, expert source, sealed card fields) is in the release.")
def sealed_fields_absent(warehouse: Warehouse, attempt_sources: AttemptSources) -> dg.AssetCheckResult:
    latest = _latest_release(warehouse)
    if latest is None:
        return check_result([{"problem": "no release recorded"}], "missing releases")
    catalogue = load_catalogue(extra=[Path(p) for p in attempt_sources.task_files])
    return check_result(sealed_problems(Path(latest["path"]), catalogue), "sealed values in the release")


@dg.asset_check(asset=release, blocking=True,
                description="Every published grade and revalidated record carries attempt_id, task_revision, "
                            "grader_version and fingerprint_id.")
def published_records_carry_lineage(warehouse: Warehouse) -> dg.AssetCheckResult:
    latest = _latest_release(warehouse)
    if latest is None:
        return check_result([{"problem": "no release recorded"}], "missing releases")
    return check_result(lineage_problems(Path(latest["path"])), "published records without a lineage key")


CHECKS = [release_matches_warehouse, sealed_fields_absent, published_records_carry_lineage]
