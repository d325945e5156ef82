"""Stage 7, accounting: the ledger (one terminal state per input row) and grader seconds by phase."""

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_RELEASE, OWNER, check_result, table_metadata
from pipelines.resources import Warehouse
from pipelines.warehouse import load_sql, markdown_table, query_dicts, run_script, transaction


def accounting_sections(rows: list[dict]) -> dict[str, dict[str, float]]:
    """{category: {name: value}} from the long-format accounting table."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        out.setdefault(r["category"], {})[r["name"]] = r["value"]
    return out


@dg.asset(
    deps=["raw_attempts", "graded_attempts", "trajectories", "revalidated_records", "family_splits"],
    group_name=GROUP_RELEASE,
    owners=[OWNER],
    kinds={"sql", "duckdb"},
    code_version="1",
    description="The ledger (every raw attempt and every quarantined row in exactly one terminal state), "
                "counts by status, and grader wall seconds by phase (start-up, compile, correctness, timing, "
                "expert, revalidation, retries, failures).",
)
def accounting(context: AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "accounting.rebuild", {"run_id": context.run.run_id})
        sections = accounting_sections(query_dicts(con, load_sql("accounting.published")))
        ledger = sections.get("ledger", {})
        md = table_metadata(
            con, "accounting", load_sql("accounting.preview"),
            attempts_in=dg.MetadataValue.int(int(ledger.get("attempts_in", 0))),
            unaccounted=dg.MetadataValue.int(int(ledger.get("unaccounted", 0))),
            terminal_states=dg.MetadataValue.json({k: int(v) for k, v in sections.get("terminal_state", {}).items()}),
            grader_seconds=dg.MetadataValue.md(markdown_table(
                [{"phase": k, "seconds": round(v, 2)} for k, v in sorted(sections.get("grader_seconds", {}).items())])),
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


CHECKS = [ledger_conservation]
