"""Stage 7, accounting: the ledger (one terminal state per input row), grader seconds by phase, and the cost of
every record (`record_costs`: seconds charged to the record they produced, unattributed seconds, coverage)."""

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_RELEASE, OWNER, check_result, table_metadata
from pipelines.core.warehouse import load_sql, markdown_table, query_dicts, run_script, transaction
from pipelines.defs.resources import Warehouse
from pipelines.reporting.cost import accounting_sections


@dg.asset(
    # contention_replay: its regrades are charged to the records they replayed, so they must be in before.
    deps=["raw_attempts", "graded_attempts", "trajectories", "revalidated_records", "contention_replay",
          "family_splits"],
    group_name=GROUP_RELEASE,
    owners=[OWNER],
    kinds={"sql", "duckdb"},
    code_version="2",
    description="The ledger (every raw attempt and every quarantined row in exactly one terminal state), "
                "counts by status, and grader wall seconds by phase (start-up, compile, correctness, timing, "
                "expert, revalidation, retries, failures), and record_costs: one row per ledger record with the "
                "grader seconds charged to it (phases, retries, recheck, contention replays, superseded grades) and "
                "its seconds from admission to acceptance; unattributed seconds and coverage as 'cost' rows.",
)
def accounting(context: AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    # Imported here, not at module level: pipelines.reporting.cost registers the `cost` status section on import, and
    # `kerneltraj status` imports the assets from inside a section while it iterates the registry.
    from pipelines.reporting.cost import cost_summary, overheads

    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "accounting.rebuild", {"run_id": context.run.run_id})
            # The replay's tables (its own DDL) exist even when no replay ran, so record_costs can read them.
            run_script(con, "contention.create")
            run_script(con, "accounting.record_costs")
            ov = overheads(con)
            run_script(con, "accounting.cost_rows", {"run_id": context.run.run_id,
                                                     "recheck_overhead_s": ov.recheck_overhead_s,
                                                     "replay_overhead_s": ov.replay_overhead_s,
                                                     "recheck_runs": ov.recheck_runs,
                                                     "replay_settings": ov.replay_settings})
        cost = cost_summary(con)
        sections = accounting_sections(query_dicts(con, load_sql("accounting.published")))
        ledger = sections.get("ledger", {})
        md = table_metadata(
            con, "accounting", load_sql("accounting.preview"),
            attempts_in=dg.MetadataValue.int(int(ledger.get("attempts_in", 0))),
            unaccounted=dg.MetadataValue.int(int(ledger.get("unaccounted", 0))),
            terminal_states=dg.MetadataValue.json({k: int(v) for k, v in sections.get("terminal_state", {}).items()}),
            grader_seconds=dg.MetadataValue.md(markdown_table(
                [{"phase": k, "seconds": round(v, 2)} for k, v in sorted(sections.get("grader_seconds", {}).items())])),
            cost_coverage_seconds=dg.MetadataValue.float(round(cost.coverage_seconds or 0.0, 6)),
            cost_coverage_records=dg.MetadataValue.float(round(cost.coverage_records or 0.0, 6)),
            unattributed_seconds=dg.MetadataValue.float(round(cost.unattributed_s, 3)),
            record_costs=dg.MetadataValue.md(markdown_table(query_dicts(con, load_sql("accounting.cost_preview")))),
        )
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=accounting, blocking=True,
                description="Conservation: input lines = raw attempts + quarantined rows = ledger rows, each ledger "
                            "row once, none without a terminal state, and the published totals add up.")
def ledger_conservation(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        c = query_dicts(con, load_sql("accounting.conservation"))[0]
        sections = accounting_sections(query_dicts(con, load_sql("accounting.published")))
        unaccounted_rows = query_dicts(con, load_sql("accounting.unaccounted"))
    ledger = sections.get("ledger", {})
    states = sections.get("terminal_state", {})
    rules = {
        "input lines = raw attempts + quarantined": c["input_lines"] == c["raw_attempts"] + c["quarantined"],
        "ledger rows = raw attempts + quarantined": c["ledger_rows"] == c["raw_attempts"] + c["quarantined"],
        "each ledger record once": c["ledger_keys"] == c["ledger_rows"],
        "no record without a terminal state": c["unaccounted"] == 0,
        "published attempts_in = ledger rows": ledger.get("attempts_in") == c["ledger_rows"],
        "published states + unaccounted = attempts_in":
            sum(states.values()) + ledger.get("unaccounted", -1) == ledger.get("attempts_in"),
    }
    broken = [{"rule": k} for k, ok in rules.items() if not ok] + [
        {"rule": "unaccounted record", "record": r["record_key"], "primary_status": r["primary_status"]}
        for r in unaccounted_rows]
    return check_result(broken, "conservation rules broken",
                        counts=dg.MetadataValue.json({k: int(v) for k, v in c.items()}))


@dg.asset_check(asset=accounting, blocking=True,
                description="Conservation of grader seconds: record_costs holds one row per ledger record, "
                            "quarantined rows carry none, the per-record seconds sum to the phase totals of "
                            "grader_seconds (start-up, compile, correctness, timing, expert, primary total, "
                            "revalidation, retries, failures) within 1e-6 relative, and every second stored in a "
                            "grade row is either charged to a record or reported as orphaned.")
def cost_conservation(warehouse: Warehouse) -> dg.AssetCheckResult:
    from pipelines.reporting.cost import conservation_problems  # see accounting()

    with warehouse.connect() as con:
        sums = query_dicts(con, load_sql("accounting.cost_record_sums"))[0]
        stored = query_dicts(con, load_sql("accounting.cost_stored_seconds"))[0]["stored_s"]
        sections = accounting_sections(query_dicts(con, load_sql("accounting.published")))
    broken = conservation_problems(sums, sections.get("grader_seconds", {}), sections.get("cost", {}), stored)
    return check_result(broken, "seconds conservation rules broken",
                        attributed_s=dg.MetadataValue.float(round(float(sums["attributed_s"]), 6)),
                        stored_grade_s=dg.MetadataValue.float(round(float(stored), 6)))


@dg.asset_check(asset=accounting, blocking=False,
                description="Accounting coverage: the share of recorded grader seconds charged to a record, and "
                            "the share of ledger records with a full cost row (every grade their terminal state "
                            "needs, with its seconds). Warns when any record lacks a full cost row.")
def cost_coverage(warehouse: Warehouse) -> dg.AssetCheckResult:
    from pipelines.reporting.cost import cost_summary  # see accounting()

    with warehouse.connect() as con:
        s = cost_summary(con)
        incomplete = query_dicts(con, load_sql("accounting.cost_incomplete"))
    # Overheads are expected (a service must start), so low seconds coverage is reported, not failed.
    return check_result(incomplete, "ledger records without a full cost row", warn_only=True,
                        coverage_seconds=dg.MetadataValue.float(round(s.coverage_seconds or 0.0, 6)),
                        coverage_records=dg.MetadataValue.float(round(s.coverage_records or 0.0, 6)),
                        attributed_s=dg.MetadataValue.float(round(s.attributed_s, 3)),
                        unattributed_s=dg.MetadataValue.json({k: round(v, 3)
                                                              for k, v in s.unattributed_parts_s.items()}),
                        records_full_cost=dg.MetadataValue.int(s.records_full_cost),
                        records=dg.MetadataValue.int(s.records))


CHECKS = [ledger_conservation, cost_conservation, cost_coverage]
