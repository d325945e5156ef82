"""Stage 1, raw attempts: every line of every input file becomes an attempt or a quarantined row
(pipelines.core.attempt_files reads them)."""

import datetime as dt
import hashlib
import json
from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_INGEST, OWNER, check_result, counts_md, table_metadata
from grader.catalogue import load_catalogue
from pipelines.core.attempt_files import display_path, imported_quarantine, load_attempt_files, quarantine_row
from pipelines.core.warehouse import bulk_write, insert_rows, load_sql, query_dicts, run_script, transaction
from pipelines.defs.resources import AttemptSources, Warehouse


@dg.asset(
    group_name=GROUP_INGEST,
    owners=[OWNER],
    kinds={"python", "duckdb"},
    code_version="1",
    description="Agent attempts admitted from the input JSONL files (task ids checked against the catalogue); "
                "rows that fail validation go to the `quarantine` table with a reason, none is dropped.",
)
def raw_attempts(context: AssetExecutionContext, warehouse: Warehouse,
                 attempt_sources: AttemptSources) -> dg.MaterializeResult:
    catalogue = load_catalogue(extra=[Path(p) for p in attempt_sources.task_files])
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    run_id = context.run.run_id
    paths = []
    for name in attempt_sources.paths:
        path = Path(name)
        if not path.is_file():
            raise FileNotFoundError(f"attempt file {path} does not exist (set KERNELTRAJ_INPUTS or the "
                                    f"attempt_sources resource)")
        paths.append(path)
    imported, files = [], []
    for name in attempt_sources.quarantine_files:
        path = Path(name)
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        rows = imported_quarantine(data, display_path(path))
        imported += [quarantine_row(q, sha, run_id, now, origin) for q, origin in rows]
        files.append({"path": display_path(path), "sha256": sha, "size_bytes": len(data), "accepted": 0,
                      "quarantined": len(rows), "nonblank_lines": sum(1 for ln in data.split(b"\n") if ln.strip()),
                      "run_id": run_id, "ingested_at": now})
    tasks = [{"task_id": c.task_id, "task_revision": c.revision, "family": c.family, "lineage": c.lineage,
              "public_card": json.dumps(c.public_card(), sort_keys=True, default=list), "run_id": run_id}
             for c in catalogue.values()]

    with warehouse.connect() as con:
        with bulk_write(con), transaction(con):
            run_script(con, "ingest.clear")
            files = load_attempt_files(con, paths, set(catalogue), run_id, now, log=context.log.info) + files
            insert_rows(con, "quarantine", imported)
            insert_rows(con, "input_files", files)
            insert_rows(con, "tasks", tasks)
        reasons = {r["reason_code"]: r["n"] for r in query_dicts(con, load_sql("ingest.quarantine_reasons"))}
        md = table_metadata(con, "raw_attempts", load_sql("ingest.preview"),
                            quarantined=dg.MetadataValue.int(sum(f["quarantined"] for f in files)),
                            quarantine_reasons=counts_md(reasons, "reason_code"),
                            input_files=dg.MetadataValue.json(
                                [{k: f[k] for k in ("path", "sha256", "accepted", "quarantined")} for f in files]),
                            tasks_in_catalogue=dg.MetadataValue.int(len(tasks)))
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=raw_attempts, blocking=True,
                description="No attempt id appears twice among admitted attempts.")
def no_duplicate_attempt_ids(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        return check_result(query_dicts(con, load_sql("ingest.duplicate_ids")), "duplicated attempt ids")


@dg.asset_check(asset=raw_attempts, blocking=True,
                description="Every quarantined row names its origin, a reason code and a reason.")
def quarantine_reasons_present(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        return check_result(query_dicts(con, load_sql("ingest.quarantine_without_reason")),
                            "quarantined rows without a reason")


@dg.asset_check(asset=raw_attempts, blocking=True,
                description="Per input file, admitted + quarantined rows equal its non-blank lines.")
def every_input_line_accounted(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        return check_result(query_dicts(con, load_sql("ingest.unaccounted_lines")),
                            "input files whose lines do not add up")


CHECKS = [no_duplicate_attempt_ids, quarantine_reasons_present, every_input_line_accounted]
