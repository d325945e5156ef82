"""`kerneltraj status --json` sections: splits, the learning comparison, and reliability."""
from __future__ import annotations

import json
from typing import Any

import duckdb

from pipelines.curation.leakage import LeakCheck
from pipelines.status import StatusContext, section
from pipelines.core.warehouse import load_sql, query_dicts


@section("splits")
def _splits(ctx: StatusContext) -> dict[str, Any] | None:
    try:
        sizes = {r["split"]: int(r["tasks"]) for r in query_dicts(ctx.con, load_sql("status_sections.split_sizes"))}
        found = {r["kind"]: int(r["n"]) for r in query_dicts(ctx.con, load_sql("status_sections.leakage_counts"))}
        ident = query_dicts(ctx.con, load_sql("status_sections.manifest_identity"))[0]
    except duckdb.CatalogException:
        return None
    return {"version": ident["version"], "manifest_sha256": ident["sha256"], "sizes": sizes,
            "leakage": {c.value: found.get(c.value, 0) for c in LeakCheck}}


@section("learning_comparison")
def _learning(ctx: StatusContext) -> dict[str, Any] | None:
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


@section("reliability")
def _reliability(ctx: StatusContext) -> dict[str, Any] | None:
    try:
        passes = query_dicts(ctx.con, load_sql("status_sections.reliability_grades"))
        quarantined = {r["reason_code"]: int(r["n"]) for r in query_dicts(ctx.con, load_sql("status_sections.quarantine_reasons"))}
    except duckdb.CatalogException:
        return None
    return {"grading_passes": {p["grading_pass"]: {"graded": int(p["graded"]), "retries": int(p["retries"] or 0),
                                                   "retry_s": round(float(p["retry_s"] or 0), 3),
                                                   "infra_errors": int(p["infra_errors"]),
                                                   "worker_faults": int(p["worker_faults"])} for p in passes},
            "quarantined_by_reason": quarantined}
