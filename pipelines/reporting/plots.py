"""Pictures an auditor reads at a glance, as PNG bytes and as markdown for Dagster metadata."""
from __future__ import annotations

import base64
import io
import math
from typing import Iterable

STATUS_COLOURS = {
    "correct": "#2b8a3e", "wrong_output": "#e67700", "cheat_flagged": "#c92a2a", "compile_error": "#5f3dc4",
    "runtime_error": "#1971c2", "timeout": "#868e96", "crashed": "#212529", "unsupported_on_backend": "#adb5bd",
    "infra_error": "#f783ac",
}


def pyplot():
    """matplotlib's pyplot on the file-only backend (no display anywhere we draw), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    pyplot().close(fig)
    return buf.getvalue()


def reward_vs_speed_png(rows: Iterable[dict], title: str = "Reward against measured speed vs the expert") -> bytes:
    """rows: dicts with status, reward and measured_speedup_geomean (None when never timed).

    Honest kernels sit on the log2 curve; floored ones sit at -24 whatever the timer said, so a
    cheat the timer measured as fast shows up on the right of the floor line.
    """
    plt = pyplot()
    rows = list(rows)
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    xs = [2 ** x for x in [i / 10 for i in range(-70, 41)]]
    ax.plot(xs, [math.log2(x) for x in xs], color="#adb5bd", lw=1, zorder=1, label="log2(speedup)")
    ax.axhline(-24, color="#c92a2a", lw=0.8, ls="--", zorder=1)
    untimed_x = 2 ** -7.5
    by_status: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        x = r.get("measured_speedup_geomean") or untimed_x
        by_status.setdefault(r["status"], []).append((min(max(x, 2 ** -7.5), 2 ** 5), r["reward"]))
    for status, pts in sorted(by_status.items()):
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=22, alpha=0.8, zorder=2,
                   color=STATUS_COLOURS.get(status, "#000"), label=f"{status} ({len(pts)})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("measured speedup vs the expert (log scale; left edge: never timed)")
    ax.set_ylabel("reward")
    ax.set_ylim(-26, 5)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(alpha=0.25)
    fig.tight_layout()
    return png(fig)


NOT_GRADED_HERE = ("infra_error", "unsupported_on_backend")


def reward_vs_speed_figures(rows: Iterable[dict]) -> dict[str, float]:
    """The picture's story in numbers, one per materialisation, so the asset's Plots tab charts them run by run:
    how many grades are correct and what they earn, how many are floored, and how many of the floored ones the
    timer measured as faster than the expert (cheats a timer alone would have rewarded)."""
    rows = [r for r in rows if r["status"] not in NOT_GRADED_HERE]
    correct = sorted(r["reward"] for r in rows if r["status"] == "correct")
    floored = [r for r in rows if r["status"] != "correct"]
    n = len(rows) or 1
    mid = len(correct) // 2
    return {
        "correct_share": round(len(correct) / n, 4),
        "correct_reward_median": round((correct[mid] + correct[~mid]) / 2, 4) if correct else float("nan"),
        "floored_share": round(len(floored) / n, 4),
        "floored_timed_faster_than_expert": float(sum((r.get("measured_speedup_geomean") or 0) > 1
                                                      for r in floored)),
    }


def png_markdown(png: bytes, alt: str) -> str:
    """Markdown with the image inline (Dagster's UI renders data URIs in markdown metadata)."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"
