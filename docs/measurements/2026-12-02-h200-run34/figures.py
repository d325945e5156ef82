"""The two pictures of this run, from the warehouse of the release that loaded its records (README's recipe):
`revalidation.png` is the release's own revalidation report plot; `recheck_delta.png` puts each correct unit's
Δlog2 (primary reward - recheck reward, the report's sign: positive, the primary grade overstates) against its
primary reward, by whether the recheck ran on the same GPU as the primary grade (hardware fingerprint).
It also prints how far each expert-twin timing sits above the fastest one seen for its task and size, per
pass (from the records). Run from the repository root:

    python3 docs/measurements/2026-12-02-h200-run34/figures.py .kerneltraj/run34/warehouse.duckdb
"""
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, ".")
from pipelines.core.warehouse import connect  # noqa: E402
from pipelines.reporting.plots import png, pyplot  # noqa: E402
from pipelines.reporting.revalidation_report import build_report, report_png  # noqa: E402

HERE = Path(__file__).parent
CLIP = -5.999  # both grades at the reward's lower clip: their delta is 0 by construction, left out

with connect(Path(sys.argv[1]), read_only=True) as con:
    (HERE / "revalidation.png").write_bytes(report_png(build_report(con)))
    rows = con.execute("""
        SELECT primary_reward, primary_reward - revalidation_reward, fingerprint_id = revalidation_fingerprint_id
        FROM revalidated_records
        WHERE primary_status = 'correct' AND revalidation_status = 'correct'
          AND NOT (primary_reward <= ? AND revalidation_reward <= ?)""", [CLIP, CLIP]).fetchall()

plt = pyplot()
fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
for same, colour, name in ((True, "#2b8a3e", "same H200 as the primary grade"),
                           (False, "#1971c2", "another H200 (a later device call)")):
    pts = [(x, d) for x, d, s in rows if s == same]
    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=16, color=colour, label=f"{name} (n={len(pts)})")
ax.axhline(0, color="#868e96", lw=0.8)
for band in (-0.05, 0.05):
    ax.axhline(band, color="#868e96", lw=0.6, ls=":")
ax.set_xlabel("primary reward (mean over sizes of log2 speedup vs the expert, clipped)")
ax.set_ylabel("Δlog2 = primary - recheck reward")
ax.set_title(f"Recheck against primary grade, {len(rows)} correct units not at the clip", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
(HERE / "recheck_delta.png").write_bytes(png(fig))
print("wrote", HERE / "revalidation.png", HERE / "recheck_delta.png")


def expert_inflation() -> None:
    """Per pass: each correct grade's expert_ms over the fastest expert_ms seen for that task and size."""
    recs = [(r["pass"], r["result"]) for r in map(json.loads, open(HERE / "records" / "grades.jsonl"))]
    for line in open(HERE / "records" / "settings.jsonl"):
        s = json.loads(line)
        recs += [("replay " + s["row"]["setting"], g["result"]) for g in s["grades"]]
    fastest: dict = defaultdict(lambda: float("inf"))
    for _, res in recs:
        for z in res.get("sizes") or []:
            fastest[res["task_id"], z["size_key"]] = min(fastest[res["task_id"], z["size_key"]], z["expert_ms"])
    by: dict = defaultdict(list)
    for p, res in recs:
        if res["status"] == "correct":
            by[p] += [z["expert_ms"] / fastest[res["task_id"], z["size_key"]] for z in res["sizes"]]
    print("| pass | timings | median | p75 | p90 | share over 1.5x |\n|---|---:|---:|---:|---:|---:|")
    for p, v in sorted(by.items()):
        v.sort()
        at = lambda q: v[int(q * (len(v) - 1))]  # noqa: E731
        print(f"| {p} | {len(v)} | {statistics.median(v):.2f} | {at(.75):.2f} | {at(.9):.2f} | "
              f"{sum(x > 1.5 for x in v) / len(v):.0%} |")


expert_inflation()
