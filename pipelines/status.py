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

from pipelines.core.warehouse import load_sql, query_dicts

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


# ---- the plain-text form of `kerneltraj status` ------------------------------------------------

def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _counts(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def _release_lines(st: dict[str, Any]) -> list[str]:
    rel = st.get("release") or {}
    if not rel.get("version"):
        return [f"release       none yet: {rel.get('note', 'run `kerneltraj release`')}"]
    pub = rel.get("published")
    where = f"published to {pub['repo']} at {pub['tag']}" if pub else "not published (`kerneltraj publish`)"
    led = st.get("ledger", {})
    checks = st.get("checks", [])
    failed = [c["name"] for c in checks if c["passed"] is not True]
    out = [f"release       {rel['version']} in {rel['path']}, {where}",
           (f"ledger        {led.get('attempts_in')} attempts in, {led.get('unaccounted')} unaccounted; "
            f"{_counts(led.get('terminal_states', {}))}"),
           "tables        " + _counts(st.get("tables", {})),
           f"checks        {len(checks) - len(failed)} of {len(checks)} passed"
           + (f"; not passed: {', '.join(failed)}" if failed else "")]
    last = st.get("last_run")
    if last:
        out.append(f"last run      {last['run_id']} {last['status']}"
                   + (f", failed checks: {', '.join(last['failed_checks'])}" if last["failed_checks"] else ""))
    return out


def _splits_lines(sp: dict[str, Any] | None) -> list[str]:
    if not sp:
        return ["splits        none in the warehouse"]
    leaks = {k: v for k, v in sp["leakage"].items() if v}
    return [(f"splits        manifest {sp['version']} ({sp['manifest_sha256'][:12]}): tasks "
             f"{_counts(sp['sizes'])}; leakage {_counts(leaks) if leaks else 'none found'}")]


def _revalidation_lines(rv: dict[str, Any] | None) -> list[str]:
    rc = (rv or {}).get("recheck")
    if not rc:
        return ["revalidation  no recheck in the warehouse"]
    tp = rc.get("throughput") or {}
    out = [f"revalidation  {rc['units']} rechecked: {rc['agree']} agree, {rc['disagree']} disagree, "
           f"{rc['ambiguous']} ambiguous, {rc['missing']} missing (agreement {_pct(rc['agree_rate'])}); "
           f"false-fast {rc['false_fast']} of {rc['first_fast']} labelled faster"
           + (f"; {tp['per_device_hour']:.0f} revalidated per {tp['device_hour_unit'][:-1]}"
              if tp.get("per_device_hour") else "")]
    for f in ((rv.get("contention") or {}).get("settings") or []):
        out.append(f"  contention  {f['setting']}: {f['verdict']}, agreement {_pct(f['labels']['agree_rate'])}, "
                   f"false-fast {f['labels']['false_fast']}" + (f", flags {', '.join(f['flags'])}" if f["flags"]
                                                                else ""))
    return out


def _learning_lines(lc: dict[str, Any] | None) -> list[str]:
    if not lc:
        return ["learning      no comparison in the warehouse"]
    out = [f"learning      verdict {lc['verdict']} over {lc['n_tasks']} held-out tasks"
           + (f"; regressed families: {', '.join(lc['regressed_families'])}" if lc["regressed_families"] else "")]
    for m in lc["metrics"]:
        if m["scope"] == "overall":
            out.append(f"  {m['metric']:<11} {m['baseline']:.3g} -> {m['treatment']:.3g} (diff {m['diff']:+.3g}, "
                       f"95% CI [{m['ci_low']:.3g}, {m['ci_high']:.3g}]) {m['verdict']}")
    return out


def _other_lines(st: dict[str, Any]) -> list[str]:
    out = []
    rel = st.get("reliability")
    if rel:
        for name, p in rel["grading_passes"].items():
            out.append(f"grading       {name}: {p['graded']} graded, {p['retries']} retries, "
                       f"{p['infra_errors']} infra errors, {p['worker_faults']} worker faults")
        if rel["quarantined_by_reason"]:
            out.append(f"quarantined   {_counts(rel['quarantined_by_reason'])} (`kerneltraj quarantine` lists them)")
    cl = st.get("claims")
    if cl:
        out.append(f"claims        {cl['claims']} imported, {cl['comparable']} comparable: "
                   f"{_counts(cl['comparable_by_class'])}")
    cost = st.get("cost")
    if cost:
        out.append(f"cost          {cost['attributed_s']:.1f} s attributed, {cost['unattributed_s']:.1f} s not; "
                   f"records fully costed {_pct(cost['coverage']['records'])}")
    return out


def render_text(st: dict[str, Any]) -> str:
    """`build_status`'s result as a page a person reads; `--json` has every figure."""
    lines = (_release_lines(st) + _splits_lines(st.get("splits")) + _revalidation_lines(st.get("revalidation"))
             + _learning_lines(st.get("learning_comparison")) + _other_lines(st))
    return "\n".join(lines + ["(every figure: `kerneltraj status --json`)"])


# Sections defined beside the stages they describe (registered on import).
import pipelines.status_sections  # noqa: E402,F401
import pipelines.claims  # noqa: E402,F401
import pipelines.contention_report  # noqa: E402,F401
import pipelines.cost  # noqa: E402,F401
