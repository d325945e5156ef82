"""`kerneltraj status`: a JSON summary of the latest release, built as a dict of named sections.

Later work adds a section with `@section("name")`; each section function gets a StatusContext
and returns any JSON-serialisable value (None leaves the section out).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import dagster as dg
import duckdb

from pipelines.warehouse import load_sql, query_dicts

SECTIONS: dict[str, Callable[["StatusContext"], Any]] = {}


@dataclass(frozen=True)
class StatusContext:
    """What a section may read: the warehouse, the Dagster instance and the latest release."""

    con: duckdb.DuckDBPyConnection
    """Read-only connection to the warehouse."""
    instance: dg.DagsterInstance | None
    """The project's Dagster instance (None when DAGSTER_HOME has none)."""
    release: dict[str, Any] | None
    """Latest row of the `releases` table (version, path, run_id, created_at, configs)."""


def section(name: str) -> Callable[[Callable[[StatusContext], Any]], Callable[[StatusContext], Any]]:
    def register(fn: Callable[[StatusContext], Any]) -> Callable[[StatusContext], Any]:
        if name in SECTIONS:
            raise ValueError(f"status section {name!r} registered twice")
        SECTIONS[name] = fn
        return fn
    return register


def build_status(con: duckdb.DuckDBPyConnection, instance: dg.DagsterInstance | None) -> dict[str, Any]:
    """Every registered section, in registration order."""
    latest = query_dicts(con, load_sql("status.latest_release"))
    ctx = StatusContext(con, instance, latest[0] if latest else None)
    out: dict[str, Any] = {}
    for name, fn in list(SECTIONS.items()):  # a section's imports may register another
        value = fn(ctx)
        if value is not None:
            out[name] = value
    return out


def check_evaluations(instance: dg.DagsterInstance, run_id: str) -> list[dict[str, Any]]:
    """Each check planned in the run with its outcome: passed true/false, or null when it never ran."""
    planned: dict[str, dict[str, Any]] = {}
    records = instance.get_records_for_run(run_id, of_type={
        dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED, dg.DagsterEventType.ASSET_CHECK_EVALUATION}).records
    for rec in records:
        ev = rec.event_log_entry.dagster_event
        data = ev.event_specific_data
        name = f"{data.asset_key.to_user_string()}:{data.check_name}"
        if ev.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED:
            planned.setdefault(name, {"name": name, "passed": None})
        else:
            planned[name] = {"name": name, "passed": bool(data.passed), "severity": data.severity.value}
    return sorted(planned.values(), key=lambda c: c["name"])


@section("release")
def _release(ctx: StatusContext) -> dict[str, Any] | None:
    r = ctx.release
    if r is None:
        return {"version": None, "note": "no release yet: run `kerneltraj release`"}
    folder = Path(r["path"])
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()) \
        if folder.is_dir() else []
    return {"version": r["version"], "path": r["path"], "run_id": r["run_id"],
            "created_at": r["created_at"].isoformat() + "Z" if r["created_at"] else None,
            "configs": json.loads(r["configs"] or "{}"), "files": files,
            "published": _published(folder.parent, r["version"])}


def _published(releases_dir: Path, version: str) -> dict[str, Any] | None:
    """What the latest publish of this version left on the Hub (None: never published)."""
    from assets.publish import read_publish_record  # imported here: only this section needs it

    rec = read_publish_record(releases_dir, version)
    if rec is None:
        return None
    return {"repo": rec["repo_id"], "endpoint": rec["endpoint"], "tag": rec["tag"], "commit": rec["commit_sha"],
            "created_commit": rec["created_commit"], "files": rec["files"], "published_at": rec["published_at"],
            "run_id": rec["run_id"],
            "checks": [{"name": n, "passed": ok} for n, ok in sorted(rec["checks"].items())]}


@section("ledger")
def _ledger(ctx: StatusContext) -> dict[str, Any]:
    rows = query_dicts(ctx.con, load_sql("status.accounting"))
    ledger = {r["name"]: int(r["value"]) for r in rows if r["category"] == "ledger"}
    states = {r["name"]: int(r["value"]) for r in rows if r["category"] == "terminal_state"}
    return {"attempts_in": ledger.get("attempts_in", 0), "terminal_states": states,
            "unaccounted": ledger.get("unaccounted", 0)}


@section("tables")
def _tables(ctx: StatusContext) -> dict[str, int]:
    rows = {r["asset"]: int(r["rows"]) for r in query_dicts(ctx.con, load_sql("status.asset_rows"))}
    if ctx.release is not None:
        rows["release"] = sum(json.loads(ctx.release["configs"] or "{}").values())
    return rows


@section("checks")
def _checks(ctx: StatusContext) -> list[dict[str, Any]]:
    if ctx.instance is None or ctx.release is None or not ctx.release["run_id"]:
        return []
    return check_evaluations(ctx.instance, ctx.release["run_id"])


@section("grader_seconds")
def _seconds(ctx: StatusContext) -> dict[str, float]:
    return {r["name"]: round(float(r["value"]), 3) for r in query_dicts(ctx.con, load_sql("status.accounting"))
            if r["category"] == "grader_seconds"}


@section("last_run")
def _last_run(ctx: StatusContext) -> dict[str, Any] | None:
    """The newest release_job run, when it is not the one that produced the latest release."""
    if ctx.instance is None:
        return None
    runs = ctx.instance.get_runs(dg.RunsFilter(job_name="release_job"), limit=1)
    if not runs or (ctx.release and runs[0].run_id == ctx.release["run_id"]):
        return None
    run = runs[0]
    failed = [c["name"] for c in check_evaluations(ctx.instance, run.run_id) if c["passed"] is False]
    return {"run_id": run.run_id, "status": run.status.value, "failed_checks": failed}


# Sections defined beside the stages they describe (registered on import).
import pipelines.status_sections  # noqa: E402,F401
import pipelines.claims  # noqa: E402,F401
import pipelines.contention_report  # noqa: E402,F401
import pipelines.cost  # noqa: E402,F401
