"""What every stage's asset shares: owner, groups, and the row-count + preview metadata."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from pipelines.defs.resources import Warehouse
from pipelines.core.warehouse import load_sql, markdown_table, query_dicts, scalar

OWNER = "team:kerneltraj"
PREVIEW_ROWS = 8

GROUP_INGEST = "ingest"
GROUP_GRADING = "grading"
GROUP_CURATION = "curation"
GROUP_RELEASE = "release"


def table_metadata(con: duckdb.DuckDBPyConnection, table: str, preview_sql: str | None = None,
                   **extra: Any) -> dict[str, Any]:
    """Row count (Dagster's standard key, so the UI charts it) and a markdown preview of the table."""
    rows = int(scalar(con, f"SELECT count(*) FROM {table}"))  # noqa: S608 (trusted table names)
    preview = query_dicts(con, preview_sql or f"SELECT * FROM {table} LIMIT {PREVIEW_ROWS}")  # noqa: S608
    return {
        "dagster/row_count": dg.MetadataValue.int(rows),
        "preview": dg.MetadataValue.md(markdown_table(preview)),
        "warehouse_table": dg.MetadataValue.text(table),
        **extra,
    }


PICTURES = "kerneltraj-pictures"
"""Folder of the instance's compute-log storage that holds the pictures assets show on their pages."""
INLINE_MARKDOWN_CHARS = 1000
"""Dagster's UI draws Markdown metadata shorter than this inline on the asset page; longer Markdown (a picture
as a data URI) only behind a `[Show Markdown]` button."""


def picture(context: Any, name: str, png: bytes, alt: str) -> dg.MetadataValue:
    """A picture as metadata the asset page draws inline: the PNG is stored beside the run's captured logs, which
    the webserver serves (its /logs/ route, Dagster's own compute-log download), and the metadata is a short
    Markdown image of it. Where the instance keeps its logs elsewhere (cloud storage), or the file cannot be
    written, the picture travels inside the Markdown as a data URI instead (shown behind [Show Markdown]).
    The local storage is known by the method that names a file of it, not by importing its class from
    `dagster._core`: a Dagster that renames either falls back to the data URI instead of failing the asset."""
    from pipelines.reporting.plots import png_markdown

    local_path = getattr(context.instance.compute_log_manager, "get_captured_local_path", None)
    key = [PICTURES, context.asset_key.to_python_identifier(), f"{context.run.run_id}-{name}"]
    if callable(local_path):
        try:
            path = Path(local_path(key, "png"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(png)
        except (OSError, ValueError):
            pass
        else:
            md = f"![{alt}](/logs/{'/'.join(key)}/png)"
            if len(md) < INLINE_MARKDOWN_CHARS:
                return dg.MetadataValue.md(md)
    return dg.MetadataValue.md(png_markdown(png, alt))


def counts_md(counts: dict[str, int], key: str = "value") -> dg.MetadataValue:
    """A two-column markdown table from a {name: count} mapping."""
    return dg.MetadataValue.md(markdown_table([{key: k, "count": v} for k, v in sorted(counts.items())]))


def check_result(failures: list[dict[str, Any]], what: str, warn_only: bool = False,
                 **metadata: Any) -> dg.AssetCheckResult:
    """Pass when `failures` is empty; otherwise show how many and the first few offending rows."""
    md: dict[str, Any] = {"failures": dg.MetadataValue.int(len(failures)), **metadata}
    if failures:
        md["examples"] = dg.MetadataValue.md(markdown_table(failures[:PREVIEW_ROWS]))
    return dg.AssetCheckResult(passed=not failures, metadata=md,
                               description=f"{len(failures)} {what}" if failures else None,
                               severity=dg.AssetCheckSeverity.WARN if warn_only else dg.AssetCheckSeverity.ERROR)


def quality_gate(asset: Any, config: str) -> Any:
    """A blocking Great Expectations gate (pipelines.defs.quality) on the published form of one table."""

    @dg.asset_check(asset=asset, name="quality_gate", blocking=True,
                    description=f"The Great Expectations suite of the published `{config}` table passes "
                                "(non-null lineage keys, unique row keys, closed status set, reward rules).")
    def _gate(warehouse: Warehouse) -> dg.AssetCheckResult:
        # Imported here: great_expectations takes seconds to import and only checks need it.
        from pipelines.defs.quality import validate_table

        with warehouse.connect() as con:
            frame = con.execute(load_sql(f"release.{config}")).df()
        report = validate_table(config, frame)
        failures = [{"expectation": e, "column": c, "observed": o} for e, c, o in report.failed]
        return check_result(failures, "failed expectations", expectations=report.evaluated,
                            rows=len(frame))

    return _gate
