"""What `kerneltraj status` reads: the StatusContext every section gets, and the sections that belong to no
single stage (the ledger, tables, checks, grader seconds, the last run, splits, the learning comparison,
reliability). A section returns any JSON-serialisable value, None to be left out;
`pipelines.cli.status.SECTIONS` lists every section in the order the status shows them."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import dagster as dg
import duckdb

from pipelines.core.warehouse import load_sql, query_dicts
from pipelines.curation.leakage import LeakCheck


@dataclass(frozen=True)
class StatusContext:
    """What a section may read: the warehouse, the Dagster instance and the latest release."""

    con: duckdb.DuckDBPyConnection
    """Read-only connection to the warehouse."""
    instance: dg.DagsterInstance | None
    """The project's Dagster instance (None when DAGSTER_HOME has none)."""
    release: dict[str, Any] | None
    """Latest row of the `releases` table (version, path, run_id, created_at, configs)."""


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


def ledger(ctx: StatusContext) -> dict[str, Any]:
    rows = query_dicts(ctx.con, load_sql("status.accounting"))
    ledger = {r["name"]: int(r["value"]) for r in rows if r["category"] == "ledger"}
    states = {r["name"]: int(r["value"]) for r in rows if r["category"] == "terminal_state"}
    return {"attempts_in": ledger.get("attempts_in", 0), "terminal_states": states,
            "unaccounted": ledger.get("unaccounted", 0)}


def tables(ctx: StatusContext) -> dict[str, int]:
    rows = {r["asset"]: int(r["rows"]) for r in query_dicts(ctx.con, load_sql("status.asset_rows"))}
    if ctx.release is not None:
        rows["release"] = sum(json.loads(ctx.release["configs"] or "{}").values())
    return rows


def checks(ctx: StatusContext) -> list[dict[str, Any]]:
    if ctx.instance is None or ctx.release is None or not ctx.release["run_id"]:
        return []
    return check_evaluations(ctx.instance, ctx.release["run_id"])


def grader_seconds(ctx: StatusContext) -> dict[str, float]:
    return {r["name"]: round(float(r["value"]), 3) for r in query_dicts(ctx.con, load_sql("status.accounting"))
            if r["category"] == "grader_seconds"}


def last_run(ctx: StatusContext) -> dict[str, Any] | None:
    """The newest release_job run, when it is not the one that produced the latest release."""
    if ctx.instance is None:
        return None
    runs = ctx.instance.get_runs(dg.RunsFilter(job_name="release_job"), limit=1)
    if not runs or (ctx.release and runs[0].run_id == ctx.release["run_id"]):
        return None
    run = runs[0]
    failed = [c["name"] for c in check_evaluations(ctx.instance, run.run_id) if c["passed"] is False]
    return {"run_id": run.run_id, "status": run.status.value, "failed_checks": failed}


def splits(ctx: StatusContext) -> dict[str, Any] | None:
    try:
        sizes = {r["split"]: int(r["tasks"]) for r in query_dicts(ctx.con, load_sql("status_sections.split_sizes"))}
        found = {r["kind"]: int(r["n"]) for r in query_dicts(ctx.con, load_sql("status_sections.leakage_counts"))}
        ident = query_dicts(ctx.con, load_sql("status_sections.manifest_identity"))[0]
    except duckdb.CatalogException:
        return None
    return {"version": ident["version"], "manifest_sha256": ident["sha256"], "sizes": sizes,
            "leakage": {c.value: found.get(c.value, 0) for c in LeakCheck}}


def learning_comparison(ctx: StatusContext) -> dict[str, Any] | None:
    try:
        latest = query_dicts(ctx.con, load_sql("learning.latest"))
    except duckdb.CatalogException:
        return None
    if not latest:
        return None
    d = json.loads(latest[0]["result_json"])
    return {"verdict": d["verdict"], "regressed_families": d["regressed_families"], "n_tasks": d["n_tasks"],
            "metrics": [{k: m[k] for k in ("metric", "scope", "baseline", "treatment", "diff", "ci_low", "ci_high",
                                           "verdict")} for m in d["overall"] + d["per_family"]]}


def reliability(ctx: StatusContext) -> dict[str, Any] | None:
    try:
        passes = query_dicts(ctx.con, load_sql("status_sections.reliability_grades"))
        quarantined = {r["reason_code"]: int(r["n"])
                       for r in query_dicts(ctx.con, load_sql("status_sections.quarantine_reasons"))}
    except duckdb.CatalogException:
        return None
    return {"grading_passes": {p["grading_pass"]: {"graded": int(p["graded"]), "retries": int(p["retries"] or 0),
                                                   "retry_s": round(float(p["retry_s"] or 0), 3),
                                                   "infra_errors": int(p["infra_errors"]),
                                                   "worker_faults": int(p["worker_faults"])} for p in passes},
            "quarantined_by_reason": quarantined}
