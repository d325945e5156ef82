"""The claim audit for a reader: what was compared, the classes, shares by level and claim size, the worst
offenders (markdown), and claimed against measured speedups in one picture."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from grader.labels import TIE_BAND_LOG2
from pipelines.core.markup import md_escape
from pipelines.core.warehouse import markdown_table
from pipelines.reporting.claim_audit import AuditClass

CLASS_COLOURS = {"reproduced": "#2b8a3e", "refuted": "#c92a2a", "ambiguous": "#f59f00", "not_graded": "#adb5bd"}


def report_markdown(s: dict[str, Any]) -> str:
    """The audit for a reader: what was compared, the classes, shares by level and claim size, offenders."""
    t = s["totals"]
    band_pct = (2 ** TIE_BAND_LOG2 - 1) * 100
    out = [
        f"**{t['claims']} claims** on {t['attempts']} attempts "
        f"({md_escape(', '.join(t['formats'] or [])) or 'none'}); "
        f"graded on: {md_escape(', '.join(t['devices'] or [])) or 'nothing yet'}.",
        "",
        f"Comparable claims ({t['comparable']}): the claim's baseline is eager PyTorch, which is our expert on "
        "KernelBench cards; compared with our *unclipped* measured speedup and its ~95% interval, tie band "
        f"±{TIE_BAND_LOG2} log2 (±{band_pct:.1f}%). A claim for another GPU than the grading one is `ambiguous / "
        "gpu_differs`, never compared.",
        "",
        markdown_table([{"class": k, "claims": v} for k, v in s["comparable_by_class"].items()]),
        "",
        "Reasons: " + (", ".join(f"`{k}` {v}" for k, v in s["by_reason"].items()) or "none"),
        "",
        "Not comparable (a baseline our grader does not time: torch.compile, CUDA graphs, cuDNN; or a task "
        "without a KernelBench card in the warehouse): "
        + ", ".join(f"{k} {v}" for k, v in s["not_comparable_by_class"].items()),
        "",
        "**Shares by level**",
        "",
        markdown_table(_pivot(s["by_level"], ("source_format", "level"))),
        "",
        "**Shares by claim size**",
        "",
        markdown_table(_pivot(s["by_bucket"], ("claim_bucket",))),
        "",
        "**Worst offenders: claimed / measured**",
        "",
        markdown_table(s["worst_ratio"]),
        "",
        "**Largest claims on kernels we floored** (wrong, cheating or broken; status kept)",
        "",
        markdown_table(s["worst_floored"]),
    ]
    return "\n".join(out)


def _pivot(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows (key..., audit_class, n, share) to one row per key with `class n (share%)` columns."""
    table: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        k = tuple(r[c] for c in keys)
        row = table.setdefault(k, {**{c: r[c] for c in keys}, **{c.value: "0" for c in AuditClass}})
        row[r["audit_class"]] = f"{int(r['n'])} ({100 * float(r['share']):.0f}%)"
    return list(table.values())


def audit_png(points: list[dict[str, Any]]) -> bytes:
    """Claimed speedup (x) against our measured one (y), log-log, coloured by audit class.

    The diagonal is 'as claimed' with the tie band around it; bars show our interval. Claims we
    could not time sit on a strip at the bottom, so none disappears from the picture."""
    from pipelines.reporting.plots import png, pyplot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=110)
    claimed = [p["claimed_speedup"] for p in points if p["claimed_speedup"]]
    measured = [p["measured_speedup"] for p in points if p["measured_speedup"]]
    lo_x = min(claimed + measured + [0.5]) / 1.5
    hi_x = max(claimed + measured + [4.0]) * 1.5
    strip = lo_x * 1.1
    ax.plot([lo_x, hi_x], [lo_x, hi_x], color="#495057", lw=1, label="as claimed")
    f = 2 ** TIE_BAND_LOG2
    ax.fill_between([lo_x, hi_x], [lo_x / f, hi_x / f], [lo_x * f, hi_x * f], color="#dee2e6", alpha=0.7)
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        if p["claimed_speedup"]:
            groups[p["audit_class"]].append(p)
    for cls, pts in sorted(groups.items()):
        xs = [p["claimed_speedup"] for p in pts]
        ys = [p["measured_speedup"] or strip for p in pts]
        err = [[max(y - 2 ** (p["measured_log2_low"] or math.log2(y)), 0) for p, y in zip(pts, ys)],
               [max(2 ** (p["measured_log2_high"] or math.log2(y)) - y, 0) for p, y in zip(pts, ys)]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", ms=4, alpha=0.75, elinewidth=0.8,
                    color=CLASS_COLOURS.get(cls, "#000"), label=f"{cls} ({len(pts)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo_x, hi_x)
    ax.set_ylim(lo_x, hi_x)
    ax.set_xlabel("claimed speedup vs eager PyTorch")
    ax.set_ylabel("our measured speedup, same baseline\n(bottom strip: not timed)")
    ax.set_title("Claims against our grades (comparable claims)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.25, which="both")
    fig.tight_layout()
    return png(fig)
