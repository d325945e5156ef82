"""Stage 4b, contention replay and the revalidation report.

`contention_replay` regrades a declared deterministic sample of correct candidate/expert pairs
under each declared sharing setting (isolated, compute hog, memory-bandwidth hog, k graders
time-slicing the device, a foreground latency service), with real co-tenant processes, and stores
the NVML reading and its contradiction flags beside every setting. `revalidation_report` turns
the recheck and the replay into agreement, distortion, latency, throughput and cost figures.
Logic lives in pipelines.grading.replay / pipelines.reporting.revalidation_report; this module only wires it.
"""

import datetime as dt
import json
import os

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_GRADING, OWNER, check_result, picture, table_metadata
from pipelines.grading.agreement import grade_label
from pipelines.grading.replay import (PRICE_TABLE, ReplayPlan, Verdict, nothing_to_replay_on_cpu, process_graders,
                                      read_nvml, replay_attempt_id, run_setting, sample_pairs)
from pipelines.reporting.revalidation_report import build_report, report_markdown, report_png
from pipelines.grading.backend import GradingBackend
from pipelines.grading.passes import grade_row
from pipelines.grading.recorded import RecordedGrader
from pipelines.defs.resources import Warehouse
from pipelines.core.warehouse import insert_rows, load_sql, markdown_table, query_dicts, run_script, transaction

REPLAY_COLUMNS = ("attempt_id", "task_id", "task_revision", "grader_version", "fingerprint_id", "device", "sharing",
                  "status", "reason_code", "reason", "reward", "speedup_geomean", "sizes", "total_s", "timing_s",
                  "tries", "retry_s", "seed", "graded_at")
"""Columns of a grade row (pipelines.grading.passes.grade_row, hidden size keys redacted) kept in contention_replay."""


class ContentionConfig(dg.Config):
    """Run config of the replay; anything left unset takes the device's declared default (ReplayPlan)."""

    pairs: int | None = None
    """Candidate/expert pairs in the sample (default 16 on a GPU, 3 on the CPU)."""
    graders: int | None = None
    """k, grader services time-slicing the device (default 4 on a GPU, 2 on the CPU)."""
    repeats: int | None = None
    """Grades per pair per setting (default 1); repeats are aggregated per pair."""
    settings: list[str] | None = None
    """Settings to run (isolated always runs first); default all five."""
    max_primary_total_s: float | None = None
    """Sample only pairs whose primary grade took at most this long (default: 1.5 s on the CPU; 0 = no cap)."""
    service_rate_hz: float | None = None
    """Requests per second sent to the latency service."""
    service_baseline_s: float | None = None
    """Seconds the latency service is measured alone first."""


@dg.asset(
    deps=["revalidated_records"],
    group_name=GROUP_GRADING,
    owners=[OWNER],
    kinds={"python", "duckdb", "pytorch"},
    code_version="1",
    pool="gpu",
    description="A declared deterministic sample of correct candidate/expert pairs regraded under declared sharing "
                "settings (isolated, compute hog, memory-bandwidth hog, k graders time-slicing one device, a "
                "foreground latency service) with real co-tenant processes; each setting stores its NVML reading "
                "and flags where NVML contradicts the declaration. On the CPU rows are labelled cpu.",
)
def contention_replay(context: AssetExecutionContext, config: ContentionConfig, regrader: GradingBackend,
                      warehouse: Warehouse) -> dg.MaterializeResult:
    run_id = context.run.run_id
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "contention.create")
        candidates = query_dicts(con, load_sql("contention.candidates"))
    runs, pairs, cuda = [], [], False
    rule = "no correct primary grade to replay"
    if isinstance(regrader, RecordedGrader):  # graded on a device elsewhere: its settings, checked against ours
        plan, pairs, rule, runs = regrader.replay(candidates)
        for r in runs:
            r.row["run_id"] = run_id  # the rows are this release's; their device is the one that graded them
        cuda = any(r.row["device_kind"] == "cuda" for r in runs)
        context.log.info(f"contention replay from the device run at {regrader.records}: {len(runs)} settings, "
                         f"{len(pairs)} pairs ({rule}); run config is not used")
    elif candidates and (idle_rule := nothing_to_replay_on_cpu(candidates, **config.model_dump())) is not None:
        rule = idle_rule
        context.log.info(f"contention replay on cpu: 0 pairs ({rule}); no grader started")
    elif candidates:
        # The warehouse stays closed while grading: graders and co-tenants never inherit its handle.
        with process_graders(regrader.spec, 1) as (grader,):
            cuda = grader.device.startswith("cuda")
            plan = ReplayPlan.for_device(cuda, **config.model_dump())
            pairs, rule = sample_pairs(candidates, plan)
            context.log.info(f"contention replay on {grader.device_name}: {len(pairs)} pairs ({rule}); "
                             f"settings {[s.value for s in plan.settings]}")
            for setting in plan.settings if pairs else ():
                runs.append(run_setting(setting, plan, grader, pairs, lambda: read_nvml(cuda), run_id, rule,
                                        context.log.info))
    by_id = {p["attempt_id"]: p for p in pairs}
    primary = {a: grade_label(p["primary_status"], p["primary_reward"], p["primary_sizes"]) for a, p in by_id.items()}
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    rows, fps = [], {}
    for run in runs:
        for g in run.grades:
            aid = replay_attempt_id(g.outcome.result.attempt_id)
            full = grade_row(g.outcome, f"contention:{run.row['setting']}", by_id[aid]["source_sha256"], run_id, now)
            label, first = grade_label(full["status"], full["reward"], full["sizes"]), primary[aid]
            rows.append({**{c: full[c] for c in REPLAY_COLUMNS}, "attempt_id": aid, "run_id": run_id,
                         "setting": run.row["setting"], "grader_index": g.grader_index, "repeat": g.repeat,
                         "label": label.label.value, "log2_lo": label.log2_lo, "log2_hi": label.log2_hi,
                         "primary_status": first.status, "primary_reward": first.reward,
                         "primary_label": first.label.value, "primary_log2_lo": first.log2_lo,
                         "primary_log2_hi": first.log2_hi})
            fps.setdefault(g.outcome.result.fingerprint_id, g.outcome.result.fingerprint)
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "contention.clear")
            insert_rows(con, "contention_settings", [r.row for r in runs])
            insert_rows(con, "contention_replay", rows)
            for fid, fp in fps.items():
                con.execute(load_sql("grading.insert_fingerprint"),
                            [fid, json.dumps(fp, sort_keys=True, default=str), run_id, fid])
        md = table_metadata(con, "contention_replay", load_sql("contention.preview"),
                            sample_rule=dg.MetadataValue.text(rule), pairs=dg.MetadataValue.int(len(pairs)),
                            settings=dg.MetadataValue.md(markdown_table([{
                                k: r.row[k] for k in ("setting", "graders", "device", "grades_requested",
                                                      "grades_recorded", "missing", "wall_s", "verdict", "flags",
                                                      "cotenants_gone", "error")} for r in runs])),
                            device_kind=dg.MetadataValue.text("cuda" if cuda else "cpu"))
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=contention_replay, blocking=True,
                description="Every co-tenant the replay started was stopped: its process group was gone at the end "
                            "of its setting, and none of its processes is alive now.")
def cotenants_stopped(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        settings = query_dicts(con, load_sql("contention.settings"))
    bad = []
    for s in settings:
        for c in json.loads(s["cotenants"] or "[]"):
            if not c["gone"] or _alive(int(c["pid"])):
                bad.append({"setting": s["setting"], "role": c["role"], "pid": c["pid"]})
    return check_result(bad, "co-tenant processes left running", settings_checked=len(settings))


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dg.asset_check(asset=contention_replay, blocking=True,
                description="Replay accounting: per setting, stored grade rows = grades recorded, recorded + "
                            "missing = requested, and every row carries its setting's device (a CPU row is never a "
                            "GPU figure).")
def replay_accounted(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        settings = query_dicts(con, load_sql("contention.settings"))
        replay = query_dicts(con, load_sql("contention.replay"))
    bad = []
    for s in settings:
        rows = [r for r in replay if r["setting"] == s["setting"]]
        if len(rows) != s["grades_recorded"] or s["grades_recorded"] + s["missing"] != s["grades_requested"]:
            bad.append({"setting": s["setting"], "problem": f"{len(rows)} rows, {s['grades_recorded']} recorded, "
                                                           f"{s['missing']} missing, {s['grades_requested']} asked"})
        devices = {r["device"] for r in rows} - {s["device"]}
        if devices:
            bad.append({"setting": s["setting"], "problem": f"rows on other devices: {sorted(devices)}"})
    orphans = {r["setting"] for r in replay} - {s["setting"] for s in settings}
    bad += [{"setting": o, "problem": "grade rows without a setting row"} for o in sorted(orphans)]
    return check_result(bad, "settings whose grades do not add up")


@dg.asset_check(asset=contention_replay, blocking=False,
                description="No declared sharing setting is contradicted by NVML (foreign processes while "
                            "isolated, a co-tenant not on the GPU, an exclusive compute mode, a co-tenant that died). "
                            "Unverifiable (CPU) and different-target (MIG) settings pass with their flags shown.")
def declared_settings_match_nvml(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect() as con:
        settings = query_dicts(con, load_sql("contention.settings"))
    bad = [{"setting": s["setting"], "flags": s["flags"]} for s in settings
           if s["verdict"] == Verdict.CONTRADICTED.value]
    return check_result(bad, "declared settings contradicted by NVML", warn_only=True,
                        verdicts=dg.MetadataValue.json({s["setting"]: s["verdict"] for s in settings}))


@dg.asset(
    deps=["contention_replay", "revalidated_records"],
    group_name=GROUP_GRADING,
    owners=[OWNER],
    kinds={"python", "duckdb"},
    code_version="1",
    description="Markdown and a plot of the recheck and the contention replay: per setting the label agreement "
                "matrix against the isolated replay, false-fast rate, reward distortion (Δlog2 median, p10/p90), "
                "ambiguous share, the foreground service's p50/p99 latency and error rate, and revalidated records "
                "per wall-clock hour, per device-hour and per dollar (declared price table; unknown stays unknown), "
                "beside failures, missing results and coverage.",
)
def revalidation_report(context: AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    with warehouse.connect() as con:
        with transaction(con):
            run_script(con, "contention.create")  # a replay that never ran still reports the recheck
        rep = build_report(con)
    md = {"report": dg.MetadataValue.md(report_markdown(rep)),
          "plot": picture(context, "plot", report_png(rep), "agreement and reward distortion per setting"),
          "settings": dg.MetadataValue.int(len(rep.settings))}
    if rep.recheck:
        md["recheck_agree_rate"] = dg.MetadataValue.float(round(rep.recheck.agree_rate or 0.0, 4))
        md["recheck_false_fast"] = dg.MetadataValue.int(rep.recheck.false_fast)
    for f in rep.settings:
        md[f"{f.setting}_agree_rate"] = dg.MetadataValue.float(round(f.labels.agree_rate or 0.0, 4))
    return dg.MaterializeResult(metadata=md)


@dg.asset_check(asset=revalidation_report, blocking=True,
                description="The report's cost figures follow the price table: a device without a declared price "
                            "has null per-dollar figures (never 0), and per-hour figures match revalidated / hours.")
def report_costs_consistent(warehouse: Warehouse) -> dg.AssetCheckResult:
    with warehouse.connect(read_only=True) as con:
        rep = build_report(con)
    bad = []
    for f in rep.settings:
        t = f.throughput
        # Recomputed by plain arithmetic from the declared table, not through the report's own helper.
        declared = PRICE_TABLE.get(f.device)
        hours = (t.wall_s or 0.0) / 3600
        want_hour = t.revalidated / hours if hours else None
        want_usd = t.revalidated / (hours * declared.usd_per_hour) if declared and hours else None
        if (t.price_usd_per_hour is None) != (declared is None):
            bad.append({"setting": f.setting, "problem": f"price {t.price_usd_per_hour} for {f.device!r}"})
        if not _close(t.per_wall_hour, want_hour) or not _close(t.per_usd, want_usd):
            bad.append({"setting": f.setting, "problem": f"per hour {t.per_wall_hour} / per USD {t.per_usd}, "
                                                         f"expected {want_hour} / {want_usd}"})
        if f.device_kind == "cpu" and t.device_hour_unit != "CPU device-hours":
            bad.append({"setting": f.setting, "problem": "CPU figure labelled as GPU-hours"})
    return check_result(bad, "cost figures that do not follow the price table", settings_checked=len(rep.settings))


def _close(a: float | None, b: float | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(b)))


CHECKS = [cotenants_stopped, replay_accounted, declared_settings_match_nvml, report_costs_consistent]
