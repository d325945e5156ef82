"""Dagster resources: the grading backend in front of the sealed grader, and the warehouse file."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Iterator, Literal, Sequence

import dagster as dg
import duckdb

from grader.contract import GradeRequest, GradeResult, Status
from pipelines.core import warehouse
from pipelines.core.settings import Settings, resolve_path


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

        extra = [str(resolve_path(p)) for p in self.task_files] or None
        with GraderService(mode=self.mode, workers=self.workers, catalogue_extra=extra) as svc:
            yield from svc.grade(batch)


class Warehouse(dg.ConfigurableResource):
    """The DuckDB warehouse file."""

    path: str
    """Path of the .duckdb file (created with its schema on first use)."""

    @contextlib.contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        with warehouse.connect(self.path, read_only=read_only) as con:
            yield con


class AttemptSources(dg.ConfigurableResource):
    """Where raw attempts and imported task cards come from."""

    paths: list[str]
    """Attempt JSONL files, absolute or relative to the repository root."""
    task_files: list[str] = []
    """Task-card JSONL files written by importers, added to the built-in catalogue."""
    quarantine_files: list[str] = []
    """JSONL of rows importers refused (one Quarantined per line), carried into the quarantine table."""


class ReleaseTarget(dg.ConfigurableResource):
    """Where releases and frozen split manifests are written."""

    releases_dir: str
    """Parent folder of release versions: <releases_dir>/<version>/data/<config>/*.parquet."""
    version: str
    """Version of the release this run writes (a folder name and a tag)."""
    splits_dir: str
    """Folder of frozen split manifests (committed with the repository)."""


def backend_from(settings: Settings, revalidation: bool = False) -> GradingBackend:
    return GradingBackend(mode=settings.revalidation_mode if revalidation else settings.grader_mode,
                          workers=settings.workers, timeout_s=settings.timeout_s,
                          profile=settings.profile, retries=settings.retries, task_files=list(settings.task_files))
