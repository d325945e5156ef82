"""Learning comparison: matched budgets, held-out scoring, paired bootstrap verdicts."""
from __future__ import annotations

import json
import math

import polars as pl
import pytest

from pipelines.curation.families import Family, Source, TaskRef
from pipelines.curation.checkpoint_comparison import BudgetMismatchError, Verdict, compare_checkpoints
from pipelines.curation.split_policy import Split, SplitPolicy, build_manifest

FLOOR = -24.0


def _task(tid: str, family: Family) -> TaskRef:
    # Distinct references so no two tasks are shape variants of each other.
    return TaskRef(tid, family, f"lab/{family.value}", Source.KERNELTRAJ, f"def run(x):\n    return x.{tid}()\n")


ATTN = [f"attn_{i}" for i in range(8)]
SCAN = [f"scan_{i}" for i in range(8)]
GEMM = [f"gemm_{i}" for i in range(4)]


@pytest.fixture(scope="module")
def manifest():
    tasks = ([_task(t, Family.ATTENTION) for t in ATTN] + [_task(t, Family.SCAN) for t in SCAN]
             + [_task(t, Family.GEMM) for t in GEMM])
    m = build_manifest(SplitPolicy("v1", ("attention", "scan"), validation_fraction=0.0), tasks)
    assert set(m.task_ids(Split.TEST_HELDOUT)) == set(ATTN + SCAN)
    return m


def _family(tid: str) -> str:
    return {"attn": "attention", "scan": "scan", "gemm": "gemm"}[tid.split("_")[0]]


def _rows(plan: dict[tuple[str, str], list[float | None]], budget: int = 1000) -> pl.DataFrame:
    """(checkpoint, task) -> speedups of its attempts; None is a wrong attempt (reward at the floor)."""
    rows = []
    for (ckpt, tid), speedups in plan.items():
        for s in speedups:
            rows.append({"checkpoint": ckpt, "task_id": tid, "family": _family(tid),
                         "status": "correct" if s is not None else "wrong_output",
                         "reward": math.log2(s) if s is not None else FLOOR, "speedup": s, "budget_tokens": budget})
    return pl.DataFrame(rows, schema={"checkpoint": pl.Utf8, "task_id": pl.Utf8, "family": pl.Utf8, "status": pl.Utf8,
                                      "reward": pl.Float64, "speedup": pl.Float64, "budget_tokens": pl.Int64})


def _plan(base, treat, tasks=ATTN + SCAN):
    plan = {}
    for i, t in enumerate(tasks):
        plan[("baseline", t)] = [None, base(i, t)]
        plan[("treatment", t)] = [None, treat(i, t)]
    return plan


def test_improved(manifest):
    res = compare_checkpoints(_rows(_plan(lambda i, t: 0.5 + 0.05 * i, lambda i, t: 1.6 + 0.1 * i)), manifest)
    assert res.verdict == Verdict.IMPROVED and res.regressed_families == ()
    reward = {(m.scope, m.metric): m for m in res.overall + res.per_family}
    assert reward[("overall", "mean_reward")].ci_low > 0
    assert reward[("overall", "fast_1.5")].diff == pytest.approx(1.0)
    assert reward[("overall", "fast_0")].verdict == Verdict.INCONCLUSIVE  # both always correct: diff 0
    assert {reward[(f, "mean_reward")].verdict for f in ("attention", "scan")} == {Verdict.IMPROVED}


def test_family_regression_wins_over_an_improved_overall(manifest):
    # Attention goes from wrong to correct (+24 per task); scan gets slower on every task.
    plan = _plan(lambda i, t: None if t in ATTN else 1.5, lambda i, t: 1.4 if t in ATTN else 0.7)
    res = compare_checkpoints(_rows(plan), manifest)
    overall = next(m for m in res.overall if m.metric == "mean_reward")
    assert overall.verdict == Verdict.IMPROVED and overall.ci_low > 0
    assert res.verdict == Verdict.REGRESSED and res.regressed_families == ("scan",)
    md = res.to_markdown()
    assert "**Verdict: regressed** (regressed families: scan)" in md and "| scan | mean_reward |" in md


def test_inconclusive_when_gains_and_losses_cancel(manifest):
    # Within each family half the tasks gain and half lose the same amount.
    res = compare_checkpoints(_rows(_plan(lambda i, t: 1.0, lambda i, t: 1.5 if i % 2 else 1 / 1.5)), manifest)
    assert res.verdict == Verdict.INCONCLUSIVE and res.regressed_families == ()
    for m in res.overall + res.per_family:
        if m.metric == "mean_reward":
            assert m.ci_low < 0 < m.ci_high and m.verdict == Verdict.INCONCLUSIVE


def test_metrics_use_the_best_attempt_and_only_correct_speedups(manifest):
    t = ATTN[:4]
    plan = {("baseline", t[0]): [None, None], ("treatment", t[0]): [1.1, None],
            ("baseline", t[1]): [0.8, None], ("treatment", t[1]): [1.6, 0.9],
            ("baseline", t[2]): [1.2, 0.3], ("treatment", t[2]): [None, None],
            ("baseline", t[3]): [2.5, 1.0], ("treatment", t[3]): [3.0, 2.0]}
    df = _rows(plan)
    # A flagged cheat with a huge timed speedup must not count toward fast_p (its reward is the floor).
    cheat = df.filter((pl.col("task_id") == t[2]) & (pl.col("checkpoint") == "treatment")).head(1).with_columns(
        pl.lit("cheat_flagged").alias("status"), pl.lit(23.9).alias("speedup"))
    df = pl.concat([df.filter(~((pl.col("task_id") == t[2]) & (pl.col("checkpoint") == "treatment"))),
                    cheat, cheat.with_columns(pl.lit("wrong_output").alias("status"), pl.lit(None).alias("speedup"))])
    res = compare_checkpoints(df, manifest)
    got = {m.metric: (m.baseline, m.treatment) for m in res.overall}
    assert got["fast_0"] == (0.75, 0.75)
    assert got["fast_1"] == (0.5, 0.75)
    assert got["fast_1.5"] == (0.25, 0.5)
    assert got["fast_2"] == (0.25, 0.25)
    base = [FLOOR, math.log2(0.8), math.log2(1.2), math.log2(2.5)]
    treat = [math.log2(1.1), math.log2(1.6), FLOOR, math.log2(3.0)]
    assert got["mean_reward"] == (pytest.approx(sum(base) / 4), pytest.approx(sum(treat) / 4))
    assert res.n_tasks == 4 and res.budget_tokens_per_task == {x: 2000 for x in t}
    assert set(res.unattempted_heldout_tasks) == set(ATTN[4:] + SCAN)


def test_unmatched_budget_raises(manifest):
    plan = _plan(lambda i, t: 1.0, lambda i, t: 1.2)
    plan[("treatment", SCAN[3])].append(1.3)  # one extra attempt: 3000 tokens against 2000
    with pytest.raises(BudgetMismatchError, match=f"{SCAN[3]}: baseline 2000 vs treatment 3000"):
        compare_checkpoints(_rows(plan), manifest)
    del plan[("treatment", SCAN[3])]  # attempted by the baseline only
    with pytest.raises(BudgetMismatchError, match=f"{SCAN[3]}: baseline 2000 vs treatment None"):
        compare_checkpoints(_rows(plan), manifest)
    df = _rows(_plan(lambda i, t: 1.0, lambda i, t: 1.2)).with_columns(
        pl.when(pl.col("task_id") == ATTN[0]).then(None).otherwise(pl.col("budget_tokens")).alias("budget_tokens"))
    with pytest.raises(BudgetMismatchError, match="null"):
        compare_checkpoints(df, manifest)


def test_only_held_out_tasks_are_scored(manifest):
    plan = _plan(lambda i, t: 0.5, lambda i, t: 1.5)
    clean = compare_checkpoints(_rows(plan), manifest)
    # Train tasks with wild results and even unmatched budgets change nothing.
    noisy = pl.concat([_rows(plan), _rows({("treatment", g): [None] for g in GEMM}, budget=99)])
    assert compare_checkpoints(noisy, manifest) == clean
    assert clean.n_tasks == 16 and {m.scope for m in clean.per_family} == {"attention", "scan"}
    wrong = _rows(plan).with_columns(pl.when(pl.col("task_id") == SCAN[0]).then(pl.lit("gemm"))
                                     .otherwise(pl.col("family")).alias("family"))
    with pytest.raises(ValueError, match="disagree with manifest"):
        compare_checkpoints(wrong, manifest)


def test_bootstrap_is_seeded_and_result_serialises(manifest):
    df = _rows(_plan(lambda i, t: 1.0, lambda i, t: 0.6 + 0.11 * i))  # distinct per-task differences
    a, b = compare_checkpoints(df, manifest), compare_checkpoints(df, manifest)
    assert a == b and a.resamples == 2000
    c = compare_checkpoints(df, manifest, seed=1)
    assert [m.ci_low for m in c.overall] != [m.ci_low for m in a.overall]
    d = json.loads(json.dumps(a.to_dict()))
    assert d["verdict"] in {"improved", "regressed", "inconclusive"} and len(d["overall"]) == 5
    assert d["overall"][-1]["metric"] == "mean_reward" and "ci_low" in d["overall"][-1]
