"""Three-way speed labels with a confidence interval, pairwise agreement, and per-task aggregation.

Pure functions over plain values (no warehouse, no Dagster), shared by the recheck
(`revalidated_records`: primary grade vs independent recheck) and the contention replay
(a grade under a sharing setting vs the isolated replay of the same candidate).

The label rule itself lives once, in grader.labels (tie band, ~95% interval of log2 speedup);
this module applies it to stored grade rows, compares two grades and aggregates per unit so
that repeated timings of one candidate count as one task, never as several.
"""
from __future__ import annotations

import enum
import hashlib
import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from grader.contract import SizeResult, Status
from grader.labels import TIE_BAND_LOG2, log2_interval, speed_label


class Label(str, enum.Enum):
    """The label of one grade (or of one unit's repeated grades)."""

    FASTER = "faster"
    SLOWER = "slower"
    TIE = "tie"
    AMBIGUOUS = "ambiguous"
    """The interval straddles a tie-band edge, or repeated grades of one unit disagree: never forced."""
    FLOORED = "floored"
    """Not a correct grade (the status says why); reward at the floor."""
    FAILED = "failed"
    """No verdict: the grader failed (infra_error, unsupported_on_backend) or the grade is missing."""


class Agreement(str, enum.Enum):
    """Outcome of comparing a grade with its recheck."""

    AGREE = "agree"
    """Same status and the same definite label."""
    DISAGREE = "disagree"
    """Different status, or two different definite labels."""
    AMBIGUOUS = "ambiguous"
    """Same status but at least one label is ambiguous: neither confirmed nor contradicted."""
    MISSING = "missing"
    """One side has no verdict; left out of agreement rates, counted apart."""


NO_VERDICT = (Status.INFRA_ERROR.value, Status.UNSUPPORTED_ON_BACKEND.value)
DEFINITE_NOT_FAST = (Label.SLOWER, Label.TIE, Label.FLOORED)


@dataclass(frozen=True)
class GradeLabel:
    """One grade reduced to what agreement needs."""

    status: str
    """Grade status (grader.contract.Status value); `mixed` for a unit whose repeats disagree on it."""
    label: Label
    """Three-way label with the interval rule, or floored / failed / ambiguous."""
    reward: float | None
    """Reward (log2 speedup for correct grades); None when there is no verdict."""
    log2_lo: float | None = None
    """Lower end of the ~95% interval of log2 speedup (correct grades only)."""
    log2_hi: float | None = None
    """Upper end of that interval."""


@dataclass(frozen=True)
class _Graded:
    """The two fields grader.labels reads from a GradeResult, rebuilt from a stored row."""

    status: Status
    """Grade status."""
    sizes: tuple[SizeResult, ...]
    """Per-size timings with their confidence intervals."""


def sizes_from_json(sizes: str | list | None) -> tuple[SizeResult, ...]:
    """SizeResults from the `sizes` JSON of a grade row (hidden keys are already redacted there)."""
    items = json.loads(sizes) if isinstance(sizes, str) else (sizes or [])
    out = []
    for d in items:
        out.append(SizeResult(
            size_key=str(d.get("size_key")), hidden=bool(d.get("hidden")), cand_ms=d.get("cand_ms"),
            expert_ms=d.get("expert_ms"), cand_ms_ci=_pair(d.get("cand_ms_ci")),
            expert_ms_ci=_pair(d.get("expert_ms_ci")), reps=int(d.get("reps") or 0), speedup=d.get("speedup")))
    return tuple(out)


def _pair(v: Any) -> tuple[float, float] | None:
    return (float(v[0]), float(v[1])) if v else None


def grade_label(status: str | None, reward: float | None, sizes: str | list | None,
                band: float = TIE_BAND_LOG2) -> GradeLabel:
    """Label one stored grade: interval rule for correct grades, floored / failed otherwise."""
    if status is None or status in NO_VERDICT:
        return GradeLabel(status or "missing", Label.FAILED, None)
    graded = _Graded(Status(status), sizes_from_json(sizes))
    label = Label(speed_label(graded, band))  # type: ignore[arg-type]  # reads .status and .sizes only
    if label is Label.FLOORED:
        return GradeLabel(status, label, reward)
    iv = log2_interval(graded)  # type: ignore[arg-type]
    return GradeLabel(status, label, reward, iv[1] if iv else None, iv[2] if iv else None)


def table_label(g: GradeLabel) -> str | None:
    """The label as stored in revalidated_records: NULL for floored and failed grades (the status says why)."""
    return None if g.label in (Label.FLOORED, Label.FAILED) else g.label.value


def consensus(grades: Sequence[GradeLabel]) -> GradeLabel:
    """One unit's label from its repeated grades: their common label, else ambiguous (never a vote).

    Failed repeats are left out; a unit with no verdict at all is failed. The reward is the median
    of the repeats' rewards, so one noisy repeat cannot drag it.
    """
    judged = [g for g in grades if g.label is not Label.FAILED]
    if not judged:
        return GradeLabel(grades[0].status if grades else "missing", Label.FAILED, None)
    statuses = {g.status for g in judged}
    labels = {g.label for g in judged}
    status = statuses.pop() if len(statuses) == 1 else "mixed"
    label = labels.pop() if len(labels) == 1 else Label.AMBIGUOUS
    rewards = [g.reward for g in judged if g.reward is not None]
    los = [g.log2_lo for g in judged if g.log2_lo is not None]
    his = [g.log2_hi for g in judged if g.log2_hi is not None]
    return GradeLabel(status, label, quantile(rewards, 0.5) if rewards else None,
                      min(los) if los else None, max(his) if his else None)


@dataclass(frozen=True)
class PairVerdict:
    """A grade compared with its recheck (first = the grade under test, second = the reference)."""

    agreement: Agreement
    """agree / disagree / ambiguous / missing."""
    revalidated: bool
    """Only agreeing pairs are revalidated."""
    false_fast: bool
    """First grade faster, recheck definitely not (slower, tie or floored)."""
    fast_unconfirmed: bool
    """First grade faster, recheck ambiguous: not counted as false, not confirmed either."""
    delta_log2: float | None
    """first reward - second reward when both are correct (positive: the first grade overstates)."""


def compare(first: GradeLabel, second: GradeLabel) -> PairVerdict:
    if Label.FAILED in (first.label, second.label):
        agreement = Agreement.MISSING
    elif first.status != second.status:
        agreement = Agreement.DISAGREE
    elif Label.AMBIGUOUS in (first.label, second.label):
        agreement = Agreement.AMBIGUOUS
    elif first.label is second.label:
        agreement = Agreement.AGREE
    else:
        agreement = Agreement.DISAGREE
    fast = first.label is Label.FASTER
    both_correct = first.status == second.status == Status.CORRECT.value
    delta = (first.reward - second.reward) if both_correct and None not in (first.reward, second.reward) else None
    return PairVerdict(agreement, agreement is Agreement.AGREE, fast and second.label in DEFINITE_NOT_FAST,
                       fast and second.label is Label.AMBIGUOUS, delta)


@dataclass(frozen=True)
class UnitVerdict:
    """One unit (a candidate, however often it was timed) compared with its reference."""

    unit: str
    """Unit key: the attempt id of the candidate."""
    task_id: str
    """Task the candidate solves; agreement is also averaged per task."""
    first: GradeLabel
    """Consensus of the unit's grades under test."""
    second: GradeLabel
    """Consensus of the unit's reference grades."""
    verdict: PairVerdict
    """The comparison of the two consensus labels."""
    timings: int
    """Grade rows behind `first` (repeats x graders): reported, never counted as tasks."""


def unit_verdicts(first_rows: Iterable[tuple[str, str, GradeLabel]],
                  second_rows: Iterable[tuple[str, str, GradeLabel]]) -> list[UnitVerdict]:
    """Group (unit, task_id, label) rows of each side by unit, take each side's consensus, compare.

    A unit present on one side only is compared against a failed label (agreement `missing`).
    """
    a: dict[str, list[GradeLabel]] = defaultdict(list)
    b: dict[str, list[GradeLabel]] = defaultdict(list)
    tasks: dict[str, str] = {}
    for side, rows in ((a, first_rows), (b, second_rows)):
        for unit, task_id, g in rows:
            side[unit].append(g)
            tasks.setdefault(unit, task_id)
    out = []
    for unit in sorted(set(a) | set(b)):
        f = consensus(a[unit]) if a.get(unit) else GradeLabel("missing", Label.FAILED, None)
        s = consensus(b[unit]) if b.get(unit) else GradeLabel("missing", Label.FAILED, None)
        out.append(UnitVerdict(unit, tasks[unit], f, s, compare(f, s), len(a.get(unit, []))))
    return out


@dataclass(frozen=True)
class AgreementSummary:
    """Agreement figures over units (each candidate once), plus the per-task average."""

    units: int
    """Units compared (candidates), whatever their number of timings."""
    tasks: int
    """Distinct tasks among the units."""
    timings: int
    """Grade rows behind the units under test."""
    agree: int
    """Units whose two labels agree (= revalidated)."""
    disagree: int
    """Units with a definite disagreement."""
    ambiguous: int
    """Units left ambiguous."""
    missing: int
    """Units with no verdict on one side."""
    false_fast: int
    """Units labelled faster first and definitely not faster in the recheck."""
    fast_unconfirmed: int
    """Units labelled faster first and ambiguous in the recheck."""
    first_fast: int
    """Units labelled faster in the grade under test (the false-fast denominator)."""
    agree_rate: float | None
    """agree / judged units (units - missing); None when none was judged."""
    agree_rate_by_task: float | None
    """Mean over tasks of each task's agree rate: a task with many candidates weighs as much as one with few."""
    ambiguous_share: float | None
    """ambiguous / judged units."""
    false_fast_rate: float | None
    """false_fast / first_fast; None when nothing was labelled faster."""
    delta_log2_n: int
    """Units correct on both sides (the distortion sample)."""
    delta_log2_median: float | None
    """Median of first - second reward (log2 units)."""
    delta_log2_p10: float | None
    """10th percentile of that difference."""
    delta_log2_p90: float | None
    """90th percentile of that difference."""
    matrix: tuple[tuple[str, str, int], ...]
    """(reference label, label under test, units) for every pair of labels seen."""


def summarise(verdicts: Sequence[UnitVerdict]) -> AgreementSummary:
    counts = Counter(v.verdict.agreement for v in verdicts)
    judged = len(verdicts) - counts[Agreement.MISSING]
    by_task: dict[str, list[bool]] = defaultdict(list)
    for v in verdicts:
        if v.verdict.agreement is not Agreement.MISSING:
            by_task[v.task_id].append(v.verdict.revalidated)
    deltas = [v.verdict.delta_log2 for v in verdicts if v.verdict.delta_log2 is not None]
    first_fast = sum(v.first.label is Label.FASTER for v in verdicts)
    false_fast = sum(v.verdict.false_fast for v in verdicts)
    matrix = Counter((_cell(v.second), _cell(v.first)) for v in verdicts)
    return AgreementSummary(
        units=len(verdicts), tasks=len({v.task_id for v in verdicts}), timings=sum(v.timings for v in verdicts),
        agree=counts[Agreement.AGREE], disagree=counts[Agreement.DISAGREE], ambiguous=counts[Agreement.AMBIGUOUS],
        missing=counts[Agreement.MISSING], false_fast=false_fast,
        fast_unconfirmed=sum(v.verdict.fast_unconfirmed for v in verdicts), first_fast=first_fast,
        agree_rate=counts[Agreement.AGREE] / judged if judged else None,
        agree_rate_by_task=(sum(sum(x) / len(x) for x in by_task.values()) / len(by_task)) if by_task else None,
        ambiguous_share=counts[Agreement.AMBIGUOUS] / judged if judged else None,
        false_fast_rate=false_fast / first_fast if first_fast else None,
        delta_log2_n=len(deltas), delta_log2_median=quantile(deltas, 0.5) if deltas else None,
        delta_log2_p10=quantile(deltas, 0.1) if deltas else None,
        delta_log2_p90=quantile(deltas, 0.9) if deltas else None,
        matrix=tuple(sorted((r, c, n) for (r, c), n in matrix.items())))


def _cell(g: GradeLabel) -> str:
    # Floored grades keep their status in the matrix: wrong_output vs cheat_flagged is a disagreement too.
    return g.status if g.label is Label.FLOORED else g.label.value


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default rule) of a non-empty sample."""
    s = sorted(xs)
    if not s:
        raise ValueError("quantile of an empty sample")
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stable_order(key: str, salt: str) -> str:
    """A deterministic, documented order for samples: sha256 of `<salt>/<key>`."""
    return hashlib.sha256(f"{salt}/{key}".encode()).hexdigest()


INTERVAL_TOLERANCE = 1e-9
"""Largest difference allowed between the SQL and the Python interval ends (float summation order)."""


def record_labels(r: dict) -> tuple[GradeLabel, GradeLabel]:
    """Both grades of one revalidated record labelled in Python."""
    return (grade_label(r["primary_status"], r["primary_reward"], r["primary_sizes"]),
            grade_label(r["revalidation_status"], r["revalidation_reward"], r["revalidation_sizes"]))


def record_problems(r: dict) -> list[str]:
    """Fields of one stored record that disagree with the Python recomputation from its two grades."""
    first, second = record_labels(r)
    v = compare(first, second)
    want = {"primary_label": table_label(first), "revalidation_label": table_label(second),
            "agreement": v.agreement.value, "agree": v.agreement is Agreement.AGREE, "revalidated": v.revalidated,
            "ambiguous_near_tie": v.agreement is Agreement.AMBIGUOUS, "false_speedup_label": v.false_fast,
            "fast_unconfirmed": v.fast_unconfirmed}
    bad = [k for k, w in want.items() if r[k] != w]
    for key, got in (("primary_log2_lo", first.log2_lo), ("primary_log2_hi", first.log2_hi),
                     ("revalidation_log2_lo", second.log2_lo), ("revalidation_log2_hi", second.log2_hi)):
        stored = r[key]
        if (stored is None) != (got is None) or (got is not None and abs(stored - got) > INTERVAL_TOLERANCE):
            bad.append(key)
    return bad
