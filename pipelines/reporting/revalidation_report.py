"""Figures of the recheck and the contention replay, from the warehouse: markdown, a PNG, a dataset-card
section and the `revalidation` section of `kerneltraj status --json`.

Every agreement figure is per unit (one candidate, however often it was timed; also averaged per
task), never per timing row. Throughput is revalidated units per wall-clock hour, per device-hour
(GPU-hours on a GPU, CPU device-hours on the CPU: labelled, never mixed) and per dollar from the
declared price table; an unknown price leaves per-dollar figures null, never 0.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import duckdb

from grader.contract import SPEEDUP_CLIP
from grader.labels import TIE_BAND_LOG2
from pipelines.grading.agreement import (AgreementSummary, GradeLabel, Label, grade_label, quantile, summarise,
                                         unit_verdicts)
from pipelines.grading.replay import PRICE_TABLE, Setting, price_usd_per_hour
from pipelines.core.markup import md_escape
from pipelines.reporting.status_sections import StatusContext
from pipelines.core.warehouse import load_sql, markdown_table, query_dicts

FAILED_STATUSES = ("infra_error", "unsupported_on_backend", "timeout", "crashed")
"""Replay grades counted as failures beside the labels (the grader, or the budget, gave out)."""


@dataclass(frozen=True)
class Throughput:
    """Revalidated units per unit of time and money."""

    device: str | None
    """The device the grades were taken on (None: more than one, so no single price applies)."""
    revalidated: int
    """Units whose grade agreed with the primary grade."""
    wall_s: float | None
    """Wall-clock seconds of the grading."""
    device_hours: float | None
    """wall hours x devices used."""
    device_hour_unit: str
    """`GPU-hours` or `CPU device-hours` (a CPU figure is never shown as a GPU one)."""
    per_wall_hour: float | None
    """revalidated / wall-clock hours."""
    per_device_hour: float | None
    """revalidated / device-hours."""
    price_usd_per_hour: float | None
    """Declared price of one device-hour (None: unknown)."""
    per_usd: float | None
    """revalidated / dollars; None when the price is unknown."""


def throughput(revalidated: int, wall_s: float | None, devices: int, device: str | None,
               device_kind: str) -> Throughput:
    hours = wall_s / 3600 if wall_s else None
    dev_h = hours * devices if hours else None
    price = price_usd_per_hour(device)
    unit = {"cuda": "GPU-hours", "cpu": "CPU device-hours"}.get(device_kind, "device-hours (CPU and GPU mixed)")
    return Throughput(device, revalidated, wall_s, dev_h, unit,
                      revalidated / hours if hours else None, revalidated / dev_h if dev_h else None, price,
                      revalidated / (dev_h * price) if dev_h and price else None)


REWARD_BANDS = (("reward < -1 (over 2x slower than the expert)", -math.inf, -1.0),
                ("-1 <= reward < 1 (within 2x of the expert)", -1.0, 1.0),
                ("reward >= 1 (over 2x faster than the expert)", 1.0, math.inf))
"""Bands of the primary reward: how far a grade moves on recheck depends on how far the candidate's time is
from its expert twin's (both are timed in the grade; only between similar times does their noise cancel)."""


@dataclass(frozen=True)
class RewardBand:
    """How far the recheck moved the reward, for units whose primary reward lies in one band."""

    band: str
    """The band of the primary reward."""
    units: int
    """Units correct in both grades, in this band (both at the reward's lower clip left out: 0 by construction)."""
    abs_delta_median: float | None
    """Median |primary reward - recheck reward| (log2)."""
    abs_delta_p90: float | None
    """90th percentile of the same."""
    abs_delta_max: float | None
    """Largest of the same."""


def reward_bands(pairs: list[tuple[float, float]]) -> tuple[RewardBand, ...]:
    """(primary reward, recheck reward) of units correct in both -> |Δlog2| per band of the primary reward."""
    clip = math.log2(SPEEDUP_CLIP[0])
    kept = [(p, abs(p - v)) for p, v in pairs if not (p <= clip and v <= clip)]
    out = []
    for name, lo, hi in REWARD_BANDS:
        d = [x for p, x in kept if lo <= p < hi]
        out.append(RewardBand(name, len(d), quantile(d, 0.5) if d else None, quantile(d, 0.9) if d else None,
                              max(d) if d else None))
    return tuple(out)


@dataclass(frozen=True)
class SettingFigures:
    """Everything the report says about one declared setting."""

    setting: str
    """Declared setting."""
    graders: int
    """Grader services that graded under it."""
    device: str
    """Device name the grades were taken on."""
    device_kind: str
    """`cuda` or `cpu`."""
    verdict: str
    """NVML verdict: verified / unverifiable / different_target / contradicted."""
    flags: tuple[str, ...]
    """Flags raised against the declared setting."""
    reference: str
    """What the labels are compared with: the isolated replay, or (for isolated) the primary grade."""
    labels: AgreementSummary
    """Agreement with the reference, per unit."""
    throughput: Throughput
    """Units agreeing with the primary grade, per hour and per dollar."""
    grades_requested: int
    """Grades the setting asked for (pairs x repeats)."""
    grades_recorded: int
    """Grades that came back."""
    failures: int
    """Recorded grades that are failures (infra_error, unsupported, timeout, crashed)."""
    missing: int
    """Grades that never came back."""
    coverage: float | None
    """grades_recorded / grades_requested: how much of the declared work is accounted for by a row."""
    service: dict[str, Any] | None
    """Latency service figures alone and while sharing (latency_service only)."""
    cotenants_gone: bool
    """Every co-tenant process was stopped."""
    error: str | None
    """Why the setting failed, if it did."""


@dataclass(frozen=True)
class Report:
    """The whole revalidation report."""

    tie_band_log2: float
    """Half-width of the tie band."""
    recheck: AgreementSummary | None
    """Primary grade vs independent recheck (revalidated_records), per unit."""
    recheck_throughput: Throughput | None
    """Recheck units revalidated per hour and dollar."""
    recheck_devices: tuple[str, ...]
    """Devices the primary grades and the rechecks were taken on (`cpu` for a CPU release)."""
    recheck_bands: tuple[RewardBand, ...]
    """How far the recheck moved the reward, by band of the primary reward (empty without a recheck)."""
    sample_rule: str | None
    """The replay's declared sample rule."""
    settings: tuple[SettingFigures, ...]
    """One entry per replayed setting, in run order."""
    nvml: tuple[dict[str, Any], ...]
    """Per setting, the NVML fields that decide the verdict."""


def _label(status: str, label: str | None, reward: float | None, lo: float | None, hi: float | None) -> GradeLabel:
    return GradeLabel(status, Label(label) if label else Label.FAILED, reward, lo, hi)


@dataclass(frozen=True)
class Recheck:
    """The recheck's figures in the report."""

    summary: AgreementSummary | None
    """Primary grade vs recheck, per unit (None: no recheck in the warehouse)."""
    throughput: Throughput | None
    """Revalidated per hour and dollar (None: no recheck run recorded its wall time)."""
    devices: tuple[str, ...]
    """Where the primary grades and the rechecks were taken."""
    bands: tuple[RewardBand, ...]
    """How far the recheck moved the reward, by band of the primary reward."""


def recheck_summary(con: duckdb.DuckDBPyConnection) -> Recheck:
    """The recheck's agreement, its throughput, the devices its two grades were taken on, and how far it moved
    the reward by band of the primary reward."""
    rows = query_dicts(con, load_sql("contention.recheck"))
    if not rows:
        return Recheck(None, None, (), ())
    first = [(r["attempt_id"], r["task_id"], grade_label(r["primary_status"], r["primary_reward"],
                                                        r["primary_sizes"])) for r in rows]
    second = [(r["attempt_id"], r["task_id"], grade_label(r["revalidation_status"], r["revalidation_reward"],
                                                         r["revalidation_sizes"])) for r in rows]
    summary = summarise(unit_verdicts(first, second))
    graded_on = tuple(sorted({d for r in rows for d in (r["primary_device"], r["revalidation_device"]) if d}))
    bands = reward_bands([(r["primary_reward"], r["revalidation_reward"]) for r in rows
                          if r["primary_status"] == r["revalidation_status"] == "correct"
                          and None not in (r["primary_reward"], r["revalidation_reward"])])
    if not has_table(con, "revalidation_runs"):
        return Recheck(summary, None, graded_on, bands)
    t = query_dicts(con, load_sql("contention.recheck_throughput"))[0]
    devices = t["devices"] or []
    device = devices[0] if len(devices) == 1 else None  # mixed devices: no single price applies
    kinds = {"cpu" if d == "cpu" else "cuda" for d in devices}
    kind = kinds.pop() if len(kinds) == 1 else "mixed"  # GPU-hours only when every recheck ran on a GPU
    tp = throughput(int(t["revalidated"] or 0), t["wall_s"], 1, device, kind) if t["wall_s"] else None
    return Recheck(summary, tp, graded_on, bands)


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(query_dicts(con, load_sql("contention.table_exists"), {"name": name})[0]["n"])


def build_report(con: duckdb.DuckDBPyConnection) -> Report:
    """Report figures from the warehouse; no settings when the replay never ran."""
    rc = recheck_summary(con)
    replayed = has_table(con, "contention_settings") and has_table(con, "contention_replay")
    settings = query_dicts(con, load_sql("contention.settings")) if replayed else []
    replay = query_dicts(con, load_sql("contention.replay")) if replayed else []
    by_setting: dict[str, list[dict]] = {}
    for r in replay:
        by_setting.setdefault(r["setting"], []).append(r)

    def units(rows: list[dict]) -> list[tuple[str, str, GradeLabel]]:
        return [(r["attempt_id"], r["task_id"], _label(r["status"], r["label"], r["reward"], r["log2_lo"],
                                                         r["log2_hi"])) for r in rows]

    primary = {r["attempt_id"]: (r["attempt_id"], r["task_id"], _label(
        r["primary_status"], r["primary_label"], r["primary_reward"], r["primary_log2_lo"], r["primary_log2_hi"]))
        for r in replay}
    isolated = units(by_setting.get(Setting.ISOLATED.value, []))
    figures = []
    for s in settings:
        rows = by_setting.get(s["setting"], [])
        mine = units(rows)
        is_iso = s["setting"] == Setting.ISOLATED.value
        labels = summarise(unit_verdicts(mine, list(primary.values()) if is_iso else isolated))
        vs_primary = summarise(unit_verdicts(mine, list(primary.values())))
        service = None
        if s["setting"] == Setting.LATENCY_SERVICE.value:
            service = {
                "alone_p50_ms": s["alone_p50_ms"], "alone_p99_ms": s["alone_p99_ms"],
                "alone_error_rate": _rate(s["alone_errors"], s["alone_requests"]),
                "p50_ms": s["service_p50_ms"], "p99_ms": s["service_p99_ms"],
                "error_rate": _rate(s["service_errors"], s["service_requests"]), "requests": s["service_requests"]}
        figures.append(SettingFigures(
            setting=s["setting"], graders=int(s["graders"] or 1), device=s["device"], device_kind=s["device_kind"],
            verdict=s["verdict"], flags=tuple(json.loads(s["flags"] or "[]")),
            reference="primary grade" if is_iso else "isolated replay", labels=labels,
            throughput=throughput(vs_primary.agree, s["wall_s"], 1, s["device"], s["device_kind"]),
            grades_requested=int(s["grades_requested"] or 0), grades_recorded=int(s["grades_recorded"] or 0),
            failures=sum(r["status"] in FAILED_STATUSES for r in rows), missing=int(s["missing"] or 0),
            coverage=_rate(s["grades_recorded"], s["grades_requested"]), service=service,
            cotenants_gone=bool(s["cotenants_gone"]), error=s["error"]))
    nvml = []
    for n in query_dicts(con, load_sql("contention.nvml")) if replayed else []:
        pre = json.loads(n["nvml_pre"] or "{}")
        nvml.append({"setting": n["setting"], "kind": pre.get("kind"), "gpu": pre.get("gpu_name"),
                     "mig": pre.get("mig_mode"), "compute_mode": pre.get("compute_mode"),
                     "processes": len(pre.get("other_processes") or []) if pre.get("kind") == "cuda" else None,
                     "sm_clock_mhz": pre.get("sm_clock_mhz")})
    return Report(TIE_BAND_LOG2, rc.summary, rc.throughput, rc.devices, rc.bands,
                  settings[0]["sample_rule"] if settings else None, tuple(figures), tuple(nvml))


def _rate(n: Any, d: Any) -> float | None:
    return n / d if n is not None and d else None


def _f(x: float | None, spec: str = ".3g", none: str = "—") -> str:
    return none if x is None else format(x, spec)


def report_markdown(rep: Report, heading: str = "###") -> str:
    kinds = {f.device_kind for f in rep.settings}
    where = ("CPU device: CPU figures, not GPU figures" if kinds == {"cpu"} else
             md_escape(", ".join(sorted({f.device for f in rep.settings}))) or "no replay yet")
    out = [f"{heading} Revalidation and contention ({where})", "",
           f"Labels: faster / slower / tie with tie band |log2 speedup| < {rep.tie_band_log2} judged on the ~95% "
           "interval of log2 speedup; an interval across a band edge is `ambiguous` (never forced). Figures count "
           "units (one candidate, however often timed) and are also averaged per task. Δlog2 is the reward "
           "under test minus the reference's, over units correct in both (the primary grade minus its recheck; "
           "a setting's grade minus its reference): positive, the grade under test overstates.", ""]
    if rep.recheck:
        r, tp = rep.recheck, rep.recheck_throughput
        on = md_escape(", ".join(rep.recheck_devices)) or "unknown device"
        out += [f"{heading}# Recheck (primary grade vs independent recheck, graded on {on})", markdown_table([{
            "units": r.units, "tasks": r.tasks, "agree": _f(r.agree_rate), "agree per task": _f(r.agree_rate_by_task),
            "ambiguous share": _f(r.ambiguous_share), "false fast": f"{r.false_fast}/{r.first_fast}",
            "fast unconfirmed": r.fast_unconfirmed,
            "Δlog2 median [p10, p90]": f"{_f(r.delta_log2_median)} [{_f(r.delta_log2_p10)}, {_f(r.delta_log2_p90)}]",
            "per wall-h": _f(tp.per_wall_hour if tp else None),
            "per USD": _f(tp.per_usd if tp else None, none="unknown")}], max_cell=60), "",
            "Recheck label (rows, the reference) against the primary grade's (columns):", "", _matrix_md(r), "",
            "How far the recheck moved the reward (|Δlog2|; units correct in both, not both at the lower clip), by "
            "the primary reward:", "",
            markdown_table([{"primary reward": b.band, "units": b.units, "median": _f(b.abs_delta_median),
                             "p90": _f(b.abs_delta_p90), "max": _f(b.abs_delta_max)} for b in rep.recheck_bands],
                           max_cell=60), ""]
    if not rep.settings:
        return "\n".join(out + ["_no contention replay in the warehouse_"])
    out += [f"Sample: {rep.sample_rule}.", "", f"{heading}# Label agreement per setting", markdown_table([{
        "setting": f.setting, "vs": f.reference, "nvml": f.verdict, "units": f.labels.units,
        "timings": f.labels.timings, "agree": _f(f.labels.agree_rate), "per task": _f(f.labels.agree_rate_by_task),
        "ambiguous": _f(f.labels.ambiguous_share), "false fast": _f(f.labels.false_fast_rate),
        "Δlog2 med [p10, p90]": f"{_f(f.labels.delta_log2_median)} [{_f(f.labels.delta_log2_p10)}, "
                                f"{_f(f.labels.delta_log2_p90)}]"} for f in rep.settings], max_cell=60), ""]
    out += [f"{heading}# Agreement matrices (rows: reference label, columns: label under the setting)"]
    for f in rep.settings:
        out += ["", f"`{f.setting}` vs {f.reference}:", "", _matrix_md(f.labels)]
    unit = rep.settings[0].throughput.device_hour_unit
    out += ["", f"{heading}# Throughput and cost (revalidated = agrees with the primary grade)", markdown_table([{
        "setting": f.setting, "graders": f.graders, "device": f.device, "wall s": _f(f.throughput.wall_s, ".1f"),
        "revalidated": f.throughput.revalidated, "per wall-h": _f(f.throughput.per_wall_hour, ".0f"),
        f"per device-h ({unit})": _f(f.throughput.per_device_hour, ".0f"),
        "USD/h": _f(f.throughput.price_usd_per_hour, ".2f", "unknown"),
        "per USD": _f(f.throughput.per_usd, ".1f", "unknown"), "failures": f.failures, "missing": f.missing,
        "coverage": _f(f.coverage)} for f in rep.settings], max_cell=60), "",
        "Prices: " + "; ".join(f"{k}: {v.usd_per_hour} USD/h ({v.basis})" for k, v in PRICE_TABLE.items())
        + "; any other device: unknown.", ""]
    svc = [f for f in rep.settings if f.service]
    if svc:
        out += [f"{heading}# Foreground latency service", markdown_table([{
            "setting": f.setting, "alone p50/p99 ms": f"{_f(f.service['alone_p50_ms'])} / "
                                                      f"{_f(f.service['alone_p99_ms'])}",
            "sharing p50/p99 ms": f"{_f(f.service['p50_ms'])} / {_f(f.service['p99_ms'])}",
            "error rate alone / sharing": f"{_f(f.service['alone_error_rate'])} / {_f(f.service['error_rate'])}",
            "requests": f.service["requests"]} for f in svc], max_cell=60), ""]
    out += [f"{heading}# Declared setting vs NVML", markdown_table([{
        **n, "verdict": f.verdict, "flags": ", ".join(f.flags) or "none", "co-tenants stopped": f.cotenants_gone,
        "error": f.error or ""} for n, f in zip(rep.nvml, rep.settings)], max_cell=60)]
    return "\n".join(out)


def _matrix_md(s: AgreementSummary) -> str:
    rows = sorted({r for r, _, _ in s.matrix})
    cols = sorted({c for _, c, _ in s.matrix})
    cells = {(r, c): n for r, c, n in s.matrix}
    return markdown_table([{"reference": r, **{c: cells.get((r, c), 0) for c in cols}} for r in rows])


def report_png(rep: Report) -> bytes:
    """Agreement, ambiguity and false-fast rate per setting, beside the reward distortion (Δlog2 p10-p90)."""
    from pipelines.reporting.plots import png, pyplot

    plt = pyplot()
    names = [f.setting for f in rep.settings] or ["(none)"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    width = 0.26
    for i, (what, colour) in enumerate((("agree_rate", "#2b8a3e"), ("ambiguous_share", "#f59f00"),
                                        ("false_fast_rate", "#c92a2a"))):
        vals = [getattr(f.labels, what) for f in rep.settings]
        xs = [j + (i - 1) * width for j in range(len(vals))]
        ax1.bar(xs, [v or 0 for v in vals], width, color=colour, label=what.replace("_", " "))
        for x, v in zip(xs, vals):
            if v is None:
                ax1.text(x, 0.02, "n/a", ha="center", fontsize=6, rotation=90)
    ax1.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax1.set_ylim(0, 1.05)
    ax1.set_title("labels vs reference, per unit", fontsize=9)
    ax1.legend(fontsize=7)
    for j, f in enumerate(rep.settings):
        s = f.labels
        if s.delta_log2_median is not None:
            ax2.plot([j, j], [s.delta_log2_p10, s.delta_log2_p90], color="#1971c2", lw=3, alpha=0.6)
            ax2.plot([j], [s.delta_log2_median], "o", color="#1971c2")
        ax2.text(j, 0.02, f"n={s.delta_log2_n}", fontsize=7, ha="center", transform=ax2.get_xaxis_transform())
    ax2.axhline(0, color="#868e96", lw=0.8)
    ax2.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax2.set_title("reward distortion Δlog2 vs reference (median, p10-p90)", fontsize=9)
    kinds = {f.device_kind for f in rep.settings}
    fig.suptitle("Contention replay on " + ("the CPU (CPU figures, not GPU)" if kinds == {"cpu"} else
                                             ", ".join(sorted({f.device for f in rep.settings})) or "nothing"),
                 fontsize=10)
    fig.tight_layout()
    return png(fig)


def dataset_card_section(con: duckdb.DuckDBPyConnection) -> str:
    """Markdown for the release's dataset card (`## Revalidation and contention`); says so when nothing ran."""
    return report_markdown(build_report(con), heading="##") + "\n"


def status_figures(rep: Report) -> dict[str, Any]:
    """The report's numbers as plain JSON (no markdown)."""
    def labels(s: AgreementSummary) -> dict[str, Any]:
        return {k: v for k, v in asdict(s).items() if k != "matrix"}

    return {
        "tie_band_log2": rep.tie_band_log2,
        "recheck": {"devices": list(rep.recheck_devices), **labels(rep.recheck),
                    "by_reward_band": [asdict(b) for b in rep.recheck_bands],
                    "throughput": asdict(rep.recheck_throughput)
                    if rep.recheck_throughput else None} if rep.recheck else None,
        "contention": {"sample_rule": rep.sample_rule, "settings": [
            {"setting": f.setting, "device": f.device, "device_kind": f.device_kind, "graders": f.graders,
             "verdict": f.verdict, "flags": list(f.flags), "reference": f.reference, "labels": labels(f.labels),
             "throughput": asdict(f.throughput), "failures": f.failures, "missing": f.missing,
             "coverage": f.coverage, "service": f.service, "cotenants_gone": f.cotenants_gone, "error": f.error}
            for f in rep.settings]} if rep.settings else None,
    }


def revalidation_status(ctx: StatusContext) -> dict[str, Any] | None:
    """None when neither the recheck nor the replay has anything in the warehouse."""
    try:
        rep = build_report(ctx.con)
    except (duckdb.CatalogException, duckdb.BinderException):  # an older warehouse without the new columns
        return None
    return status_figures(rep) if rep.recheck or rep.settings else None
