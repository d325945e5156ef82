"""A grading client without Dagster: how a grader is configured, the request it builds, and the retry loop
over whatever reaches a GraderService.

The Dagster resource (`pipelines.grading.backend.GradingBackend`), the contention replay's grader processes
(`pipelines.grading.replay_grader.ProcessGrader`) and the device run (`pipelines.grading.device_run`, which
runs where only torch, triton and the standard library are installed) all grade through `grade_with_retries`,
so a grade and its retries mean the same wherever it was made. Nothing here imports Dagster, DuckDB or pydantic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from grader.contract import GradeRequest, GradeResult, Status

SPEC_FIELDS = ("mode", "workers", "timeout_s", "profile", "retries", "task_files", "compile_cache")
"""The settings of a grader, named alike in `GraderSpec` and the `GradingBackend` resource."""


@dataclass(frozen=True)
class GraderSpec:
    """How to grade: the settings of the GraderService and the retry rule."""

    mode: str = "zygote"
    """`zygote`: workers forked from a pre-imported parent; `fresh`: a new interpreter per attempt."""
    workers: int = 1
    """Worker processes grading at once."""
    timeout_s: float = 60.0
    """Wall-clock budget per attempt, seconds."""
    profile: str = "auto"
    """Size profile requested from the grader."""
    retries: int = 1
    """Extra tries for attempts that came back infra_error or not at all (candidate faults are final)."""
    task_files: tuple[str, ...] = ()
    """Task-card JSONL files loaded beside the built-in catalogue."""
    compile_cache: str = ""
    """Folder of shared extension builds, `off`, or empty for the grader's default."""

    def request(self, attempt_id: str, task_id: str, source: str, language: str, entry_point: str,
                seed: int) -> GradeRequest:
        return GradeRequest(attempt_id=attempt_id, task_id=task_id, source=source, language=language,
                            entry_point=entry_point, seed=seed, profile=self.profile, timeout_s=self.timeout_s)


@dataclass(frozen=True)
class GradeOutcome:
    """One attempt's final grade plus what it cost to get it."""

    result: GradeResult
    """The grade that counts (the last try's)."""
    tries: int
    """How many times the attempt was sent to the grader (1 = no retry)."""
    retry_s: float
    """Grader wall seconds spent on tries that were thrown away (infra errors, lost results)."""


class GradingIncomplete(RuntimeError):
    """The grader returned no result for some requests even after retries."""


def grade_with_retries(retries: int, service_grade: Callable[[list[GradeRequest]], Iterable[GradeResult]],
                       requests: Sequence[GradeRequest]) -> Iterator[GradeOutcome]:
    """Yield one outcome per request, in completion order; raise GradingIncomplete for lost ones.

    An infra_error (the grader's failure, not the candidate's) and a request the service never answered are
    sent again, up to `retries` more times; the wall time of thrown-away tries is counted against them."""
    pending = {r.attempt_id: r for r in requests}
    tries = dict.fromkeys(pending, 0)
    wasted = dict.fromkeys(pending, 0.0)
    for round_no in range(retries + 1):
        if not pending:
            return
        batch = list(pending.values())
        for r in batch:
            tries[r.attempt_id] += 1
        started = time.monotonic()
        answered: set[str] = set()
        for result in service_grade(batch):
            if result.attempt_id not in pending or result.attempt_id in answered:
                raise GradingIncomplete(
                    f"grader returned a result for an unknown or already answered attempt {result.attempt_id!r}")
            answered.add(result.attempt_id)
            if result.status is Status.INFRA_ERROR and round_no < retries:
                wasted[result.attempt_id] += float(result.phase_seconds.get("total", 0.0))
                continue
            del pending[result.attempt_id]
            yield GradeOutcome(result, tries[result.attempt_id], wasted[result.attempt_id])
        # Requests the service never answered cost this round's wall time; count it against them.
        for aid in set(pending) - answered:
            wasted[aid] += (time.monotonic() - started) / len(batch)
    if pending:
        raise GradingIncomplete(f"no grade after {retries + 1} tries for: {sorted(pending)[:10]}")


def service_grade(spec: GraderSpec, batch: list[GradeRequest]) -> Iterator[GradeResult]:
    """One GraderService in this process, for this batch."""
    # Imported here: the service lives in the sealed grader package, which loads torch lazily.
    from grader.service import GraderService

    extra = [str(Path(p)) for p in spec.task_files] or None
    with GraderService(mode=spec.mode, workers=spec.workers, catalogue_extra=extra,
                       compile_cache=spec.compile_cache or None) as svc:
        yield from svc.grade(batch)
