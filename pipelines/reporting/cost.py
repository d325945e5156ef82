"""Cost accounting: grader seconds charged to the records they produced (`record_costs`), what no record can
carry (unattributed), the coverage of the two, and the `cost` section of `kerneltraj status --json`.

The per-record table and the long-format `cost` rows are built by sql/accounting.sql (the accounting asset);
this module reads them back, computes the recorded overheads the SQL is handed, and checks that seconds are
conserved: the per-record costs sum to the phase totals the accounting table already published from the grades.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import duckdb

from pipelines.reporting.revalidation_report import has_table
from pipelines.reporting.status_sections import StatusContext
from pipelines.core.warehouse import load_sql, query_dicts

CONSERVATION_REL_TOL = 1e-6
"""Largest relative difference allowed between two sums of the same seconds (float summation order)."""
CONSERVATION_ABS_TOL = 1e-9
"""Absolute slack for sums that are (near) zero, where a relative tolerance means nothing."""
CONSERVED_PHASES = ("startup", "compile", "correctness", "timing", "expert", "primary_total", "revalidation",
                    "retries", "failures")
"""`grader_seconds` rows of the accounting table that the per-record costs must reproduce."""
STATUS_PHASES = ("startup", "compile", "correctness", "timing", "expert", "reference", "transfer", "teardown",
                 "primary_total", "primary_retries", "failures", "revalidation", "revalidation_retries", "replay",
                 "superseded")
"""`cost` rows shown as totals by phase (nested phases: reference and transfer sit inside correctness, expert
inside timing; primary_total holds every primary phase)."""


def accounting_sections(rows: list[dict]) -> dict[str, dict[str, float]]:
    """{category: {name: value}} from the long-format accounting table."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        out.setdefault(r["category"], {})[r["name"]] = r["value"]
    return out


@dataclass(frozen=True)
class Overheads:
    """Recorded grading wall seconds that no record can carry."""

    recheck_overhead_s: float
    """Recheck runs' wall seconds not inside any grade they stored (service start, zygote boot, commits)."""
    recheck_runs: int | None
    """Recheck runs on record; None when the warehouse has no revalidation_runs table."""
    replay_overhead_s: float
    """Contention settings' grader-service seconds not inside any replay grade (co-tenants, baselines, boots)."""
    replay_settings: int
    """Contention settings on record."""


def overheads(con: duckdb.DuckDBPyConnection) -> Overheads:
    """The overheads from the run tables that exist (revalidation_runs is created by the recheck's first run)."""
    recheck = (query_dicts(con, load_sql("accounting.recheck_overhead"))[0]
               if has_table(con, "revalidation_runs") else {"runs": None, "overhead_s": 0.0})
    replay = (query_dicts(con, load_sql("accounting.replay_overhead"))[0]
              if has_table(con, "contention_settings") else {"settings": 0, "overhead_s": 0.0})
    return Overheads(float(recheck["overhead_s"]), recheck["runs"], float(replay["overhead_s"]),
                     int(replay["settings"]))


def close(a: float | None, b: float | None) -> bool:
    """Same seconds up to float summation order (both None counts as equal; one None does not)."""
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=CONSERVATION_REL_TOL, abs_tol=CONSERVATION_ABS_TOL)


def conservation_problems(record_sums: dict[str, Any], grader_seconds: dict[str, float],
                          cost: dict[str, float], stored_s: float) -> list[dict[str, Any]]:
    """Rules of seconds conservation broken, one dict per rule (empty when all hold).

    record_sums: accounting.cost_record_sums; grader_seconds / cost: the published rows of those categories;
    stored_s: every second stored in a grade row (accounting.cost_stored_seconds)."""
    bad: list[dict[str, Any]] = []

    def rule(name: str, ok: bool, got: Any, want: Any) -> None:
        if not ok:
            bad.append({"rule": name, "got": got, "want": want})

    rule("one cost row per ledger record", record_sums["records"] == record_sums["ledger_rows"]
         == record_sums["record_keys"], record_sums["records"], record_sums["ledger_rows"])
    rule("quarantined rows carry zero seconds", record_sums["charged_quarantine"] == 0,
         record_sums["charged_quarantine"], 0)
    for phase in CONSERVED_PHASES:
        want = grader_seconds.get(phase, 0.0)  # the rebuild emits no row for a phase no grade has
        rule(f"per-record {phase} = grader_seconds/{phase}", close(record_sums[phase], want),
             record_sums[phase], want)
    rule("per-record total = published attributed_s", close(record_sums["attributed_s"], cost.get("attributed_s")),
         record_sums["attributed_s"], cost.get("attributed_s"))
    # Every stored grade second lands on a record or among the orphans: nothing dropped, nothing twice.
    rule("stored grade seconds = attributed + orphaned",
         close(stored_s, record_sums["attributed_s"] + cost.get("unattributed_orphan_s", math.nan)),
         stored_s, record_sums["attributed_s"] + cost.get("unattributed_orphan_s", math.nan))
    parts = sum(cost.get(k, math.nan) for k in ("unattributed_orphan_s", "unattributed_recheck_overhead_s",
                                                "unattributed_replay_overhead_s"))
    rule("unattributed = orphans + overheads", close(cost.get("unattributed_s"), parts), cost.get("unattributed_s"),
         parts)
    rule("recorded = attributed + unattributed",
         close(cost.get("recorded_s"), cost.get("attributed_s", math.nan) + cost.get("unattributed_s", math.nan)),
         cost.get("recorded_s"), None)
    return bad


@dataclass(frozen=True)
class CostSummary:
    """The cost figures of one warehouse."""

    phase_totals_s: dict[str, float]
    """Grader seconds by phase over all records (nested phases, see STATUS_PHASES)."""
    attributed_s: float
    """Grader seconds charged to some record."""
    unattributed_s: float
    """Recorded grader seconds no record carries (orphaned grades, run overheads)."""
    unattributed_parts_s: dict[str, float]
    """unattributed_s split into orphans, recheck overhead and replay overhead."""
    coverage_seconds: float | None
    """attributed_s / (attributed_s + unattributed_s); None when nothing was recorded."""
    records: int
    """Ledger records (raw attempts and quarantined rows)."""
    records_full_cost: int
    """Records whose cost row is complete (every grade their terminal state needs, with its seconds)."""
    coverage_records: float | None
    """records_full_cost / records."""
    per_record_median_s: float | None
    """Median grader seconds of a raw record."""
    per_record_p90_s: float | None
    """90th percentile grader seconds of a raw record."""
    recheck_runs_recorded: int | None
    """Recheck runs whose wall time is on record (None: no revalidation_runs table, overhead unmeasured)."""
    replay_settings_recorded: int | None
    """Contention settings whose wall time is on record."""
    accepted: int
    """Records that ended revalidated."""
    accepted_timed: int
    """Accepted records whose submission and acceptance times are both known."""
    median_submit_to_accept_s: float | None
    """Median seconds from admission (ingest) to the later of the two accepting grades."""


def cost_summary(con: duckdb.DuckDBPyConnection) -> CostSummary:
    """Figures from record_costs and the published `cost` rows; raises CatalogException without them."""
    cost = {r["name"]: r["value"] for r in query_dicts(con, load_sql("accounting.cost_published"))}
    dist = query_dicts(con, load_sql("accounting.cost_distribution"))[0]
    parts = ("unattributed_orphan_s", "unattributed_recheck_overhead_s", "unattributed_replay_overhead_s")
    return CostSummary(
        phase_totals_s={p: float(cost.get(p) or 0.0) for p in STATUS_PHASES},
        attributed_s=float(cost.get("attributed_s") or 0.0), unattributed_s=float(cost.get("unattributed_s") or 0.0),
        unattributed_parts_s={p.removeprefix("unattributed_"): float(cost.get(p) or 0.0) for p in parts},
        coverage_seconds=cost.get("coverage_seconds"), records=int(cost.get("records") or 0),
        records_full_cost=int(cost.get("records_full_cost") or 0), coverage_records=cost.get("coverage_records"),
        per_record_median_s=dist["median_s"], per_record_p90_s=dist["p90_s"],
        recheck_runs_recorded=_int(cost.get("recheck_runs_recorded")),
        replay_settings_recorded=_int(cost.get("replay_settings_recorded")),
        accepted=int(cost.get("accepted") or 0), accepted_timed=int(cost.get("accepted_timed") or 0),
        median_submit_to_accept_s=dist["median_submit_to_accept_s"])


def _int(x: float | None) -> int | None:
    return None if x is None else int(x)


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


def status_figures(s: CostSummary) -> dict[str, Any]:
    """The summary as plain JSON, seconds rounded to the millisecond."""
    return {
        "phase_totals_s": {k: _r(v) for k, v in s.phase_totals_s.items()},
        "attributed_s": _r(s.attributed_s), "unattributed_s": _r(s.unattributed_s),
        "unattributed_parts_s": {k: _r(v) for k, v in s.unattributed_parts_s.items()},
        # The primary pass's wall time is stored nowhere, so its service start-up is in no figure: seconds
        # coverage is an upper bound; runs recorded say which overheads could be measured at all.
        "overhead_sources": {"recheck_runs": s.recheck_runs_recorded, "replay_settings": s.replay_settings_recorded,
                             "primary_runs": None},
        "per_record_s": {"median": _r(s.per_record_median_s), "p90": _r(s.per_record_p90_s)},
        "median_submit_to_accept_s": _r(s.median_submit_to_accept_s),
        "accepted": s.accepted, "accepted_timed": s.accepted_timed,
        "coverage": {"seconds": _r(s.coverage_seconds, 6), "records": _r(s.coverage_records, 6),
                     "records_full_cost": s.records_full_cost, "records_total": s.records},
    }


def cost_status(ctx: StatusContext) -> dict[str, Any] | None:
    """None until the accounting asset has built record_costs."""
    try:
        s = cost_summary(ctx.con)
    except (duckdb.CatalogException, duckdb.BinderException):
        return None
    return status_figures(s)
