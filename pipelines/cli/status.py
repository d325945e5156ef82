"""`kerneltraj status`: a JSON summary of the latest release as a dict of named sections, and its plain-text form.

SECTIONS is the one list of sections, in the order they are shown; each is a function of a StatusContext
(pipelines.reporting.status_sections) defined beside what it summarises. Importing a module registers
nothing, so the order never depends on which module was imported first."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import dagster as dg
import duckdb

from pipelines.core.warehouse import load_sql, query_dicts
from pipelines.publishing.publish_record import read_publish_record
from pipelines.reporting import claim_audit, cost, revalidation_report, status_sections as ss
from pipelines.reporting.status_sections import StatusContext


def release_section(ctx: StatusContext) -> dict[str, Any] | None:
    """The latest release, its files and what its latest publish left on the Hub."""
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
    rec = read_publish_record(releases_dir, version)
    if rec is None:
        return None
    return {"repo": rec["repo_id"], "endpoint": rec["endpoint"], "tag": rec["tag"], "commit": rec["commit_sha"],
            "created_commit": rec["created_commit"], "files": rec["files"], "published_at": rec["published_at"],
            "run_id": rec["run_id"],
            "checks": [{"name": n, "passed": ok} for n, ok in sorted(rec["checks"].items())]}


SECTIONS: dict[str, Callable[[StatusContext], Any]] = {
    "release": release_section,
    "ledger": ss.ledger,
    "tables": ss.tables,
    "checks": ss.checks,
    "grader_seconds": ss.grader_seconds,
    "last_run": ss.last_run,
    "splits": ss.splits,
    "learning_comparison": ss.learning_comparison,
    "reliability": ss.reliability,
    "claims": claim_audit.claims_status,
    "revalidation": revalidation_report.revalidation_status,
    "cost": cost.cost_status,
}


def build_status(con: duckdb.DuckDBPyConnection, instance: dg.DagsterInstance | None) -> dict[str, Any]:
    """Every section of SECTIONS that has something to say, in that order."""
    latest = query_dicts(con, load_sql("status.latest_release"))
    ctx = StatusContext(con, instance, latest[0] if latest else None)
    out: dict[str, Any] = {}
    for name, fn in SECTIONS.items():
        value = fn(ctx)
        if value is not None:
            out[name] = value
    return out


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
    on = ", ".join(rc.get("devices") or []) or "unknown device"
    out = [f"revalidation  {rc['units']} rechecked on {on}: {rc['agree']} agree, {rc['disagree']} disagree, "
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
        on = ", ".join(cl.get("devices") or []) or "no device yet"
        out.append(f"claims        {cl['claims']} imported, graded on {on}; {cl['comparable']} comparable: "
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
