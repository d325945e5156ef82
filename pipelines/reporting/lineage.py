"""`kerneltraj lineage RECORD_ID`: a published record's way back to its raw attempt.

From the attempt id: the raw row (file:line, agent, trajectory, turn, source hash), every grade
taken of it (status, reward, grader version, task revision, seed), the recheck, its split, the
hardware fingerprints, the ledger's terminal state, and the Dagster runs that produced each step.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import duckdb

from pipelines.core.warehouse import load_sql, query_dicts


class RecordNotFound(LookupError):
    """No raw attempt or quarantined row has this id."""


def _iso(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() + "Z" if hasattr(v, "isoformat") else v) for k, v in row.items()}


def _run(instance: dg.DagsterInstance | None, run_id: str | None) -> dict[str, Any] | None:
    if not run_id:
        return None
    out: dict[str, Any] = {"run_id": run_id}
    run = instance.get_run_by_id(run_id) if instance is not None else None
    if run is not None:
        out.update(job=run.job_name, status=run.status.value)
    return out


def trace(con: duckdb.DuckDBPyConnection, record_id: str, instance: dg.DagsterInstance | None = None,
          release: dict[str, Any] | None = None) -> dict[str, Any]:
    """The lineage of one attempt id, or of the row at a file:line (admitted or quarantined; ours or
    an imported corpus's own); raises RecordNotFound."""
    p = {"record_id": record_id}
    raw = query_dicts(con, load_sql("lineage.raw_attempt"), p)
    if raw:  # found by file:line: everything after the raw row is keyed by its attempt id
        p = {"record_id": raw[0]["attempt_id"]}
    quarantined = [_iso(q) for q in query_dicts(con, load_sql("lineage.quarantined"), p)]
    if not raw and not quarantined:
        raise RecordNotFound(f"no attempt id or file:line {record_id!r} in the warehouse")
    grades = [_iso(g) for g in query_dicts(con, load_sql("lineage.grades"), p)]
    reval = query_dicts(con, load_sql("lineage.revalidation"), p)
    traj = query_dicts(con, load_sql("lineage.trajectory"), p)
    split = query_dicts(con, load_sql("lineage.split"), p)
    fps = [{**f, "fingerprint": json.loads(f["fingerprint"])}
           for f in query_dicts(con, load_sql("lineage.fingerprints"), p)]
    ledger = query_dicts(con, load_sql("lineage.ledger"), p)
    out: dict[str, Any] = {
        "record_id": record_id,
        "raw_attempt": _iso(raw[0]) if raw else None,
        "quarantined": quarantined,
        "grades": grades,
        "revalidation": reval[0] if reval else None,
        "trajectory": traj[0] if traj else None,
        "split": split[0] if split else None,
        "fingerprints": fps,
        "terminal_state": ledger[0]["terminal_state"] if len(ledger) == 1 else [r["terminal_state"] for r in ledger],
    }
    runs = {"ingest": raw[0]["ingest_run_id"] if raw else (quarantined[0]["ingest_run_id"] if quarantined else None)}
    for g in grades:
        if g["current"]:
            runs[f"grade_{g['grading_pass']}"] = g["run_id"]
    if reval:
        runs["revalidated_records"] = reval[0]["run_id"]
    if release is not None:
        shards = sorted((Path(release["path"]) / "data" / "grades").glob("*.parquet"))  # one per split
        published = any(query_dicts(con, load_sql("lineage.published"), {"shard": str(shard), **p})[0]["rows"] > 0
                        for shard in shards)
        out["release"] = {"version": release["version"], "published": bool(published), "run_id": release["run_id"]}
        runs["release"] = release["run_id"]
    out["dagster_runs"] = {k: _run(instance, v) for k, v in runs.items() if v}
    return out


def _text(v: Any) -> str:
    """A value as a person reads it: no Python reprs of None, lists or dicts."""
    if v is None:
        return "-"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_text(x)}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return ", ".join(map(_text, v)) or "-"
    return str(v)


def render_text(t: dict[str, Any]) -> str:
    """A short human-readable form of `trace`'s result."""
    state = _text(t["terminal_state"]) if t["terminal_state"] else "none yet (the ledger has not seen it)"
    lines = [f"record {t['record_id']}  terminal state: {state}"]
    r = t["raw_attempt"]
    if r:
        lines.append(f"  raw attempt   {r['attempt_id']} at {r['origin']}"
                     + (f" (imported from {r['import_origin']})" if r.get("import_origin") else ""))
        lines.append(f"                agent={r['agent']} model={r['model']} trajectory={r['trajectory_id']} "
                     f"turn={r['turn']} task={r['task_id']} source_sha256={r['source_sha256'][:16]}…")
    for q in t["quarantined"]:
        lines.append(f"  quarantined   {q['origin']}"
                     + (f" (imported from {q['import_origin']})" if q.get("import_origin") else "")
                     + f"  {q['reason_code']}: {q['reason']}")
    for g in t["grades"]:
        lines.append(f"  grade {g['grading_pass']:<12} {g['status']:<14} reward={g['reward']:.4g} "
                     f"grader={g['grader_version']} task_rev={g['task_revision']} seed={g['seed']} "
                     f"fp={g['fingerprint_id']} run={g['run_id']}{'' if g['current'] else ' (superseded)'}")
    if t["revalidation"]:
        v = t["revalidation"]
        lines.append(f"  recheck       speed labels {_text(v['primary_label'])} then "
                     f"{_text(v['revalidation_label'])}; revalidated={_text(v['revalidated'])} "
                     f"near_tie={_text(v['ambiguous_near_tie'])}")
    if t["split"]:
        lines.append(f"  split         {t['split']['split']} (family {t['split']['family']}, "
                     f"manifest {t['split']['split_version']})")
    for f in t["fingerprints"]:
        fp = f["fingerprint"]
        lines.append(f"  hardware      {f['fingerprint_id']}: {_text(fp.get('gpu_name') or fp.get('device') or fp)}")
    if "release" in t:
        lines.append(f"  release       {t['release']['version']} published={t['release']['published']}")
    for step, run in t["dagster_runs"].items():
        lines.append(f"  dagster run   {step:<20} {run['run_id']}" + (f" ({run['status']})" if "status" in run else ""))
    return "\n".join(lines)
