"""The learning comparison: did the treatment checkpoint get better on held-out families?

Input: graded attempts of two checkpoints (`baseline`, `treatment`) with columns checkpoint,
task_id, family, status, reward, speedup, budget_tokens. Rules:
- Budgets must match: for every scored task both checkpoints declare the same total
  budget_tokens (a task attempted by one checkpoint only, or a null budget, is a mismatch).
  Unmatched budgets raise `BudgetMismatchError`: comparing unequal budgets measures the budget.
- Only tasks the manifest puts in test_heldout are scored; the manifest's family is used.
- Per task and checkpoint the BEST attempt counts (best@budget): the maximum reward, and for
  fast_p the largest speedup among correct attempts.
- Metrics per checkpoint: fast_p for p in (0, 1, 1.5, 2) = share of tasks with a correct attempt
  whose speedup vs the expert exceeds p (fast_0 = share with any correct attempt); mean_reward.
- Uncertainty: paired bootstrap over tasks (tasks are the unit; 2000 resamples, fixed seed),
  95% percentile interval of treatment minus baseline, overall and per family.
- Verdict per metric: improved (CI > 0), regressed (CI < 0), inconclusive (CI spans 0, or fewer
  than 2 tasks). Overall: regressed if any family's mean-reward CI is below 0 (the regressed
  families are listed), else the verdict of the overall mean-reward CI (improved, inconclusive,
  or regressed when the pooled CI is below 0 although no single family's is).
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import polars as pl

from pipelines.core.rawattempt import RawAttempt, parse_lines
from pipelines.curation.split_policy import Manifest, Split

CHECKPOINTS = ("baseline", "treatment")
FAST_P = (0.0, 1.0, 1.5, 2.0)
RESAMPLES = 2000
CI_LEVEL = 0.95
SEED = 0
MIN_TASKS_FOR_VERDICT = 2
"""With one task the bootstrap interval collapses to a point: no task-level uncertainty exists."""
REQUIRED_COLUMNS = ("checkpoint", "task_id", "family", "status", "reward", "speedup", "budget_tokens")
SELECTION = "best attempt per task per checkpoint (max reward; fast_p uses the best correct speedup)"
GRADE_SEED = 17
"""Request seed of every checkpoint attempt's grade, both arms alike (a device plan asks the same)."""


def checkpoint_attempts(paths: Iterable[str | Path], known_tasks: Iterable[str]) -> list[RawAttempt]:
    """The checkpoint sets' attempts, in file order. They are ours: a bad row is a bug, and says so."""
    attempts: list[RawAttempt] = []
    for path in paths:
        with open(path, "rb") as f:
            for row in parse_lines(f, str(path), known_tasks=known_tasks):
                if not isinstance(row, RawAttempt):
                    raise ValueError(f"{row.origin}: {row.reason}")
                attempts.append(row)
    return attempts


class Verdict(str, enum.Enum):
    """Outcome of one comparison."""

    IMPROVED = "improved"
    REGRESSED = "regressed"
    INCONCLUSIVE = "inconclusive"


class BudgetMismatchError(ValueError):
    """The checkpoints did not get the same declared budget on every scored task."""


@dataclass(frozen=True)
class MetricResult:
    """One metric in one scope (overall or a family)."""

    metric: str
    """`fast_0`, `fast_1`, `fast_1.5`, `fast_2` or `mean_reward`."""
    scope: str
    """`overall` or a family name."""
    n_tasks: int
    baseline: float
    treatment: float
    diff: float
    """treatment - baseline (share of tasks for fast_p, reward units for mean_reward)."""
    ci_low: float
    ci_high: float
    verdict: Verdict


@dataclass(frozen=True)
class LearningComparison:
    """Baseline vs treatment on held-out families, with task-level uncertainty."""

    manifest_version: str
    held_out_families: tuple[str, ...]
    n_tasks: int
    """Held-out tasks scored (attempted by both checkpoints)."""
    budget_tokens_per_task: dict[str, int]
    """Matched declared budget of each scored task (same for both checkpoints)."""
    selection: str
    resamples: int
    seed: int
    ci_level: float
    overall: tuple[MetricResult, ...]
    per_family: tuple[MetricResult, ...]
    verdict: Verdict
    regressed_families: tuple[str, ...]
    """Families whose mean-reward CI lies below 0."""
    unattempted_heldout_tasks: tuple[str, ...]
    """Held-out tasks neither checkpoint attempted (not scored; listed so nothing hides)."""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["verdict"] = self.verdict.value
        for part in ("overall", "per_family"):
            for m in d[part]:
                m["verdict"] = m["verdict"].value
        return d

    def to_markdown(self) -> str:
        lines = [f"## Learning comparison (split manifest {self.manifest_version})", "",
                 f"**Verdict: {self.verdict.value}**"
                 + (f" (regressed families: {', '.join(self.regressed_families)})" if self.regressed_families else ""),
                 "", f"- held-out families: {', '.join(self.held_out_families)}; tasks scored: {self.n_tasks}",
                 f"- selection: {self.selection}",
                 f"- budgets matched per task (total tokens per checkpoint): "
                 f"{sum(self.budget_tokens_per_task.values())}",
                 f"- uncertainty: paired task-level bootstrap, {self.resamples} resamples, seed {self.seed}, "
                 f"{int(self.ci_level * 100)}% CI"]
        if self.unattempted_heldout_tasks:
            lines.append(f"- held-out tasks not attempted: {', '.join(self.unattempted_heldout_tasks)}")
        lines += ["", "| scope | metric | tasks | baseline | treatment | diff | 95% CI | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for m in self.overall + self.per_family:
            lines.append(f"| {m.scope} | {m.metric} | {m.n_tasks} | {m.baseline:.3f} | {m.treatment:.3f} | "
                         f"{m.diff:+.3f} | [{m.ci_low:+.3f}, {m.ci_high:+.3f}] | {m.verdict.value} |")
        return "\n".join(lines) + "\n"


def _metric_names() -> list[str]:
    return [f"fast_{p:g}" for p in FAST_P] + ["mean_reward"]


def per_task_scores(attempts: pl.DataFrame) -> pl.DataFrame:
    """One row per (checkpoint, task): best reward and the metric indicators."""
    correct_speed = pl.when(pl.col("status") == "correct").then(pl.col("speedup")).otherwise(None)
    best = attempts.group_by("checkpoint", "task_id").agg(
        pl.col("family").first(), pl.col("reward").max().alias("mean_reward"),
        (pl.col("status") == "correct").any().alias("any_correct"),
        correct_speed.max().alias("best_speedup"))
    cols = [pl.col("any_correct").cast(pl.Float64).alias("fast_0")]
    cols += [(pl.col("any_correct") & (pl.col("best_speedup").fill_null(0.0) > p)).cast(pl.Float64).alias(f"fast_{p:g}")
             for p in FAST_P if p > 0]
    return best.with_columns(cols)


def _check_budgets(attempts: pl.DataFrame) -> dict[str, int]:
    if attempts["budget_tokens"].null_count():
        bad = attempts.filter(pl.col("budget_tokens").is_null())["task_id"].unique().sort().to_list()
        raise BudgetMismatchError(f"budget_tokens is null for attempts of tasks {bad[:10]}: every attempt "
                                  f"must declare its budget")
    totals = attempts.group_by("task_id", "checkpoint").agg(pl.col("budget_tokens").sum())
    wide = {c: dict(totals.filter(pl.col("checkpoint") == c).select("task_id", "budget_tokens").iter_rows())
            for c in CHECKPOINTS}
    tasks = sorted(set(wide["baseline"]) | set(wide["treatment"]))
    bad = [f"{t}: baseline {wide['baseline'].get(t)} vs treatment {wide['treatment'].get(t)}"
           for t in tasks if wide["baseline"].get(t) != wide["treatment"].get(t)]
    if bad:
        raise BudgetMismatchError(
            f"declared budgets differ on {len(bad)} held-out task(s) ({'; '.join(bad[:10])}); the comparison "
            f"needs the same total budget_tokens per task for both checkpoints")
    return {t: int(wide["baseline"][t]) for t in tasks}


def _verdict(lo: float, hi: float, n: int) -> Verdict:
    if n < MIN_TASKS_FOR_VERDICT:
        return Verdict.INCONCLUSIVE
    return Verdict.IMPROVED if lo > 0 else Verdict.REGRESSED if hi < 0 else Verdict.INCONCLUSIVE


def _compare(base: np.ndarray, treat: np.ndarray, metric: str, scope: str, rng: np.random.Generator,
             resamples: int, ci_level: float) -> MetricResult:
    n = len(base)
    d = treat - base
    idx = rng.integers(0, n, size=(resamples, n))  # paired: one task draw moves both checkpoints
    boot = d[idx].mean(axis=1)
    alpha = (1.0 - ci_level) / 2
    lo, hi = (float(x) for x in np.quantile(boot, [alpha, 1 - alpha]))
    return MetricResult(metric, scope, n, float(base.mean()), float(treat.mean()), float(d.mean()), lo, hi,
                        _verdict(lo, hi, n))


def compare_checkpoints(attempts: pl.DataFrame, manifest: Manifest, resamples: int = RESAMPLES,
                        seed: int = SEED, ci_level: float = CI_LEVEL) -> LearningComparison:
    """Score baseline vs treatment on the manifest's held-out tasks (see the module docstring)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in attempts.columns]
    if missing:
        raise ValueError(f"attempts lack column(s) {missing}; need {list(REQUIRED_COLUMNS)}")
    unknown = set(attempts["checkpoint"].unique().to_list()) - set(CHECKPOINTS)
    if unknown:
        raise ValueError(f"unknown checkpoint label(s) {sorted(unknown)}; use {CHECKPOINTS}")
    held = {r.task_id: r.family for r in manifest.rows if r.split == Split.TEST_HELDOUT}
    scored = attempts.filter(pl.col("task_id").is_in(list(held)))
    wrong_family = scored.filter(pl.col("family") != pl.col("task_id").replace_strict(held, default=None))
    if wrong_family.height:
        ex = wrong_family.select("task_id", "family").unique().head(5).rows()
        raise ValueError(f"attempts carry families that disagree with manifest {manifest.version}: {ex}")
    budgets = _check_budgets(scored)
    if not budgets:
        raise ValueError(f"no attempts on held-out tasks of manifest {manifest.version}: nothing to compare")
    scores = per_task_scores(scored)
    names = _metric_names()
    b = scores.filter(pl.col("checkpoint") == "baseline").sort("task_id")
    t = scores.filter(pl.col("checkpoint") == "treatment").sort("task_id")
    rng = np.random.default_rng(seed)
    overall = tuple(_compare(b[m].to_numpy(), t[m].to_numpy(), m, "overall", rng, resamples, ci_level)
                    for m in names)
    per_family = []
    for fam in sorted(set(b["family"].to_list())):
        bf, tf = b.filter(pl.col("family") == fam), t.filter(pl.col("family") == fam)
        per_family += [_compare(bf[m].to_numpy(), tf[m].to_numpy(), m, fam, rng, resamples, ci_level) for m in names]
    regressed = tuple(m.scope for m in per_family if m.metric == "mean_reward" and m.verdict == Verdict.REGRESSED)
    overall_reward = next(m for m in overall if m.metric == "mean_reward")
    verdict = Verdict.REGRESSED if regressed else (
        Verdict.IMPROVED if overall_reward.verdict == Verdict.IMPROVED else
        Verdict.REGRESSED if overall_reward.verdict == Verdict.REGRESSED else Verdict.INCONCLUSIVE)
    return LearningComparison(
        manifest.version, manifest.policy.held_out_families, len(budgets), budgets, SELECTION, resamples, seed,
        ci_level, overall, tuple(per_family), verdict, regressed,
        tuple(sorted(set(held) - set(budgets))))
