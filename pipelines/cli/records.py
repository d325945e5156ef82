"""What the warehouse holds, read: `kerneltraj status` (the latest release), `kerneltraj lineage` (a record's way
back to its raw attempt) and `kerneltraj quarantine` (the rows the last ingest refused)."""
from __future__ import annotations

import argparse
import json
import sys

from pipelines.cli.args import fail, settings_from_args
from pipelines.cli.instance import instance_or_none, quiet_dagster


def cmd_status(args: argparse.Namespace) -> int:
    quiet_dagster()
    from pipelines.cli.status import build_status, render_text
    from pipelines.core.warehouse import connect

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        status = build_status(con, instance_or_none(settings))
    print(json.dumps(status, indent=2, sort_keys=False, default=str) if args.json else render_text(status))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    quiet_dagster()
    from pipelines.reporting.lineage import RecordNotFound, render_text, trace
    from pipelines.core.warehouse import connect, load_sql, query_dicts

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        latest = query_dicts(con, load_sql("status.latest_release"))
        try:
            t = trace(con, args.record_id, instance_or_none(settings), latest[0] if latest else None)
        except RecordNotFound as e:
            return fail("lineage", f"{e}; give an attempt id or a file:line from the inputs of the last "
                         "release (`kerneltraj quarantine` lists the refused rows)")
    print(json.dumps(t, indent=2, default=str) if args.json else render_text(t))
    return 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    """List the quarantined rows of the last ingest: where each came from, and why."""
    from pipelines.core.warehouse import connect, load_sql, query_dicts

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        rows = query_dicts(con, load_sql("ingest.quarantine_rows"), {"reason": args.reason})
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    for r in rows:  # the corpus's own file:line for an imported row, ours otherwise
        print(f"{r['import_origin'] or r['origin']}\t{r['reason_code']}\t{r['attempt_id'] or '-'}\t{r['reason']}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["reason_code"]] = counts.get(r["reason_code"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    print(f"{len(rows)} quarantined row(s)" + (f": {summary}" if summary else ""), file=sys.stderr)
    return 0
