"""Stage 1, raw attempts: every line of every input file becomes an attempt or a quarantined row."""

import dataclasses
import datetime as dt
import hashlib
import json
from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_INGEST, OWNER, check_result, counts_md, table_metadata
from grader.catalogue import load_catalogue
from pipelines.rawattempt import Quarantined, RawAttempt, parse_lines
from pipelines.resources import REPO_ROOT, AttemptSources, Warehouse, resolve_path
from pipelines.warehouse import insert_rows, load_sql, query_dicts, run_script, transaction


def display_path(path: Path) -> str:
    """Repo-relative when inside the repository, so origins are the same on every clone."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path.resolve())


def attempt_row(a: RawAttempt, input_sha256: str, run_id: str, now: dt.datetime) -> dict:
    d = dataclasses.asdict(a)
    d["extra"] = json.dumps(d["extra"], sort_keys=True, default=str)
    return {**d, "source_sha256": a.source_sha256, "input_sha256": input_sha256, "run_id": run_id,
            "ingested_at": now}


def quarantine_row(q: Quarantined, input_sha256: str, run_id: str, now: dt.datetime,
                   import_origin: str | None = None) -> dict:
    return {**dataclasses.asdict(q), "import_origin": import_origin, "input_sha256": input_sha256,
            "run_id": run_id, "ingested_at": now}


def imported_quarantine(data: bytes, where: str) -> list[tuple[Quarantined, str | None]]:
    """Rows an importer refused (one Quarantined as JSON per line), re-homed to this file's lines.

    The importer's own origin is kept as `import_origin`; a line that is not a valid row is itself
    quarantined, so every line still ends as exactly one row."""
    out = []
    for n, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        here = f"{where}:{n}"
        try:
            d = json.loads(raw)
            q = Quarantined(here, d.get("attempt_id"), str(d["reason_code"]), str(d["reason"]),
                            str(d.get("raw_excerpt", "")))
            out.append((q, str(d.get("origin") or "") or None))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            out.append((Quarantined(here, None, "bad_quarantine_row", f"not a quarantined-row record: {e}",
                                    raw[:200].decode("utf-8", "replace")), None))
    return out


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
    catalogue = load_catalogue(extra=[resolve_path(p) for p in attempt_sources.task_files])
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    run_id = context.run.run_id
    seen: set[str] = set()
    attempts, quarantined, files = [], [], []
    for name in attempt_sources.paths:
        path = resolve_path(name)
        if not path.is_file():
            raise FileNotFoundError(f"attempt file {path} does not exist (set KERNELTRAJ_INPUTS or the "
                                    f"attempt_sources resource)")
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        n_ok = n_bad = 0
        # Split on \n only so `file:line` origins match what an editor shows.
        for item in parse_lines(data.split(b"\n"), display_path(path), catalogue.keys(), seen):
            if isinstance(item, RawAttempt):
                attempts.append(attempt_row(item, sha, run_id, now))
                n_ok += 1
            else:
                quarantined.append(quarantine_row(item, sha, run_id, now))
                n_bad += 1
        files.append({"path": display_path(path), "sha256": sha, "size_bytes": len(data), "accepted": n_ok,
                      "quarantined": n_bad, "nonblank_lines": sum(1 for ln in data.split(b"\n") if ln.strip()),
                      "run_id": run_id, "ingested_at": now})
        context.log.info(f"{display_path(path)}: {n_ok} attempts, {n_bad} quarantined (sha256 {sha[:12]})")
    for name in attempt_sources.quarantine_files:
        path = resolve_path(name)
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        rows = imported_quarantine(data, display_path(path))
        quarantined += [quarantine_row(q, sha, run_id, now, origin) for q, origin in rows]
        files.append({"path": display_path(path), "sha256": sha, "size_bytes": len(data), "accepted": 0,
                      "quarantined": len(rows), "nonblank_lines": sum(1 for ln in data.split(b"\n") if ln.strip()),
                      "run_id": run_id, "ingested_at": now})
    tasks = [{"task_id": c.task_id, "task_revision": c.revision, "family": c.family, "lineage": c.lineage,
              "public_card": json.dumps(c.public_card(), sort_keys=True, default=list), "run_id": run_id}
             for c in catalogue.values()]

    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "ingest.clear")
            insert_rows(con, "raw_attempts", attempts)
            insert_rows(con, "quarantine", quarantined)
            insert_rows(con, "input_files", files)
            insert_rows(con, "tasks", tasks)
        reasons = {r["reason_code"]: r["n"] for r in query_dicts(con, load_sql("ingest.quarantine_reasons"))}
        md = table_metadata(con, "raw_attempts", load_sql("ingest.preview"),
                            quarantined=dg.MetadataValue.int(len(quarantined)),
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
