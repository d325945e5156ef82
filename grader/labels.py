"""Three-way speed labels with a declared tie band and a confidence interval.

A correct grade is `faster` when its whole ~95% interval of log2(speedup vs the expert) lies
above +TIE_BAND_LOG2, `slower` when it lies below -TIE_BAND_LOG2, `tie` when it lies inside the
band, and `ambiguous` when it straddles a band edge: a near-tie is never forced either way.
Anything not correct is `floored`.
"""
from __future__ import annotations

import math

from grader.contract import GradeResult, Status

TIE_BAND_LOG2 = 0.05
"""Half-width of the tie band in log2 units (about +-3.5% speed)."""

LABELS = ("faster", "slower", "tie", "ambiguous", "floored")


def log2_interval(r: GradeResult) -> tuple[float, float, float] | None:
    """(centre, low, high) of log2 of the geometric-mean speedup; None when not timed."""
    timed = [s for s in r.sizes if s.speedup and s.cand_ms and s.expert_ms]
    if not timed:
        return None
    centre = sum(math.log2(s.speedup) for s in timed) / len(timed)
    var = 0.0
    for s in timed:
        if s.log2_speedup_ci:  # paired calls: the interval of the ratio itself, drift cancelled
            var += ((s.log2_speedup_ci[1] - s.log2_speedup_ci[0]) / 2) ** 2
            continue
        c_lo, c_hi = s.cand_ms_ci or (s.cand_ms, s.cand_ms)
        e_lo, e_hi = s.expert_ms_ci or (s.expert_ms, s.expert_ms)
        rel = math.hypot((c_hi - c_lo) / (2 * s.cand_ms), (e_hi - e_lo) / (2 * s.expert_ms))
        var += (rel / math.log(2)) ** 2
    half = math.sqrt(var) / len(timed)
    return centre, centre - half, centre + half


def speed_label(r: GradeResult, band: float = TIE_BAND_LOG2) -> str:
    if r.status is not Status.CORRECT:
        return "floored"
    iv = log2_interval(r)
    if iv is None:
        return "ambiguous"
    _, lo, hi = iv
    if lo > band:
        return "faster"
    if hi < -band:
        return "slower"
    if lo >= -band and hi <= band:
        return "tie"
    return "ambiguous"


def point_label(log2_speedup: float, band: float = TIE_BAND_LOG2) -> str:
    """Label from a point estimate alone (no interval): faster / slower / tie."""
    return "faster" if log2_speedup > band else "slower" if log2_speedup < -band else "tie"
