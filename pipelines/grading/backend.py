"""The grading backend: the sealed grader behind a Dagster resource, with retries for what it could not judge.

Other backends (Ray, the contention replay's grader process) subclass it and change only how a batch
reaches a GraderService."""
from __future__ import annotations

from pathlib import Path
import time
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import dagster as dg

from grader.contract import GradeRequest, GradeResult, Status


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


class GradingBackend(dg.ConfigurableResource):
    """The sealed grader behind Dagster: a GraderService per grading pass, with retries for infra failures."""

    mode: Literal["zygote", "fresh"] = "zygote"
    """`zygote`: workers forked from a pre-imported parent; `fresh`: a new interpreter per attempt."""
    workers: int = 1
    """Worker processes grading at once."""
    timeout_s: float = 60.0
    """Wall-clock budget per attempt, seconds."""
    profile: Literal["auto", "cpu", "gpu"] = "auto"
    """Size profile requested from the grader."""
    retries: int = 1
    """Extra tries for attempts that came back infra_error or not at all (candidate faults are final)."""
    task_files: list[str] = []
    """Task-card JSONL files written by importers, loaded by the grader next to its built-in catalogue."""
    compile_cache: str = ""
    """Folder of shared extension builds, `off`, or empty for the grader's default (Settings.compile_cache)."""

    def request(self, attempt_id: str, task_id: str, source: str, language: str, entry_point: str,
                seed: int) -> GradeRequest:
        return GradeRequest(attempt_id=attempt_id, task_id=task_id, source=source, language=language,
                            entry_point=entry_point, seed=seed, profile=self.profile, timeout_s=self.timeout_s)

    def grade(self, requests: Sequence[GradeRequest]) -> Iterator[GradeOutcome]:
        """Yield one outcome per request, in completion order; raise GradingIncomplete for lost ones."""
        pending = {r.attempt_id: r for r in requests}
        tries = dict.fromkeys(pending, 0)
        wasted = dict.fromkeys(pending, 0.0)
        for round_no in range(self.retries + 1):
            if not pending:
                return
            batch = list(pending.values())
            for r in batch:
                tries[r.attempt_id] += 1
            started = time.monotonic()
            answered: set[str] = set()
            for result in self._service_grade(batch):
                if result.attempt_id not in pending or result.attempt_id in answered:
                    raise GradingIncomplete(
                        f"grader returned a result for an unknown or already answered attempt {result.attempt_id!r}")
                answered.add(result.attempt_id)
                last_round = round_no == self.retries
                if result.status is Status.INFRA_ERROR and not last_round:
                    wasted[result.attempt_id] += float(result.phase_seconds.get("total", 0.0))
                    continue
                del pending[result.attempt_id]
                yield GradeOutcome(result, tries[result.attempt_id], wasted[result.attempt_id])
            # Requests the service never answered cost this round's wall time; count it against them.
            for aid in set(pending) - answered:
                wasted[aid] += (time.monotonic() - started) / len(batch)
        if pending:
            raise GradingIncomplete(f"no grade after {self.retries + 1} tries for: {sorted(pending)[:10]}")

    def _service_grade(self, batch: list[GradeRequest]) -> Iterator[GradeResult]:
        # Imported here: the service lives in the sealed grader package, which loads torch lazily.
        from grader.service import GraderService

        extra = [str(Path(p)) for p in self.task_files] or None
        with GraderService(mode=self.mode, workers=self.workers, catalogue_extra=extra,
                           compile_cache=self.compile_cache or None) as svc:
            yield from svc.grade(batch)
