"""The grading backend: the sealed grader behind a Dagster resource, with retries for what it could not judge.

Its settings and retry loop are `pipelines.grading.client`'s (no Dagster there), so a grade means the same in the
resource, in the contention replay's grader processes and in a device run. Other backends (Ray, a device run's
records) subclass it and change only how a batch reaches a GraderService."""
from __future__ import annotations

from typing import Iterator, Literal, Sequence

import dagster as dg

from grader.contract import GradeRequest, GradeResult
from pipelines.grading.client import (SPEC_FIELDS, GradeOutcome, GraderSpec, GradingIncomplete, grade_with_retries,
                                      service_grade)

__all__ = ["GradeOutcome", "GradingBackend", "GradingIncomplete"]


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

    @property
    def spec(self) -> GraderSpec:
        """These settings as the Dagster-free client takes them."""
        return GraderSpec(**{f: tuple(getattr(self, f)) if f == "task_files" else getattr(self, f)
                             for f in SPEC_FIELDS})

    def request(self, attempt_id: str, task_id: str, source: str, language: str, entry_point: str,
                seed: int) -> GradeRequest:
        return self.spec.request(attempt_id, task_id, source, language, entry_point, seed)

    def grade(self, requests: Sequence[GradeRequest]) -> Iterator[GradeOutcome]:
        """Yield one outcome per request, in completion order; raise GradingIncomplete for lost ones."""
        return grade_with_retries(self.retries, self._service_grade, requests)

    def recorded_wall_s(self, grading_pass: str) -> float | None:
        """Wall seconds a pass took on the machine that graded it, when that was not this process (a device run's
        records); None: the pass is graded, and timed, here."""
        return None

    def _service_grade(self, batch: list[GradeRequest]) -> Iterator[GradeResult]:
        return service_grade(self.spec, batch)
