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
    sent again, up to `retries` more times; the wall time of thrown-away tries is counted against them. Requests
    for the same attempt (the acceptance's repeats, one seed each) are each answered: a result, which names its
    attempt but not the request's seed, answers the first of that attempt's requests still unanswered in the try.
    Until 2026-12-06 they were keyed by attempt alone, and every repeat but the last was silently dropped."""
    pending: dict[str, list[_Pending]] = {}
    for r in requests:
        pending.setdefault(r.attempt_id, []).append(_Pending(r))
    for round_no in range(retries + 1):
        if not pending:
            return
        unanswered = {aid: list(entries) for aid, entries in pending.items()}
        batch = [e.request for entries in pending.values() for e in entries]
        for entries in pending.values():
            for e in entries:
                e.tries += 1
        started = time.monotonic()
        for result in service_grade(batch):
            if not unanswered.get(result.attempt_id):
                raise GradingIncomplete(
                    f"grader returned a result for an unknown or already answered attempt {result.attempt_id!r}")
            e = unanswered[result.attempt_id].pop(0)
            if result.status is Status.INFRA_ERROR and round_no < retries:
                e.retry_s += float(result.phase_seconds.get("total", 0.0))
                continue
            pending[result.attempt_id].remove(e)
            if not pending[result.attempt_id]:
                del pending[result.attempt_id]
            yield GradeOutcome(result, e.tries, e.retry_s)
        # Requests the service never answered cost this round's wall time; count it against them.
        for entries in unanswered.values():
            for e in entries:
                e.retry_s += (time.monotonic() - started) / len(batch)
    if pending:
        raise GradingIncomplete(f"no grade after {retries + 1} tries for: {sorted(pending)[:10]}")


@dataclass(eq=False)
class _Pending:
    """One request still owed an outcome, with what it has cost so far."""

    request: GradeRequest
    tries: int = 0
    retry_s: float = 0.0


def service_grade(spec: GraderSpec, batch: list[GradeRequest]) -> Iterator[GradeResult]:
    """One GraderService in this process, for this batch."""
    # Imported here: the service lives in the sealed grader package, which loads torch lazily.
    from grader.service import GraderService

    extra = [str(Path(p)) for p in spec.task_files] or None
    with GraderService(mode=spec.mode, workers=spec.workers, catalogue_extra=extra,
                       compile_cache=spec.compile_cache or None) as svc:
        yield from svc.grade(batch)
