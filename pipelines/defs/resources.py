"""Dagster resources: the warehouse file, where attempts come from, where releases go, and the grading backends
built from the settings."""
from __future__ import annotations

import contextlib
from typing import Iterator

import dagster as dg
import duckdb

from pipelines.core import warehouse
from pipelines.core.settings import Settings
from pipelines.grading.backend import GradingBackend
from pipelines.grading.recorded import RecordedGrader


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
    """Attempt JSONL files (a relative path is taken from the folder the run started in)."""
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
    """Folder of frozen split manifests (default <state>/splits)."""


class PublishGate(dg.ConfigurableResource):
    """What must hold before a release leaves the machine: the latest outcome of every blocking check passed."""

    blocking_checks: list[str] = []
    """`asset:check` names of the blocking checks of the release and of the stages it is built from; a publish
    with none to consult is refused."""


def backend_from(settings: Settings, revalidation: bool = False) -> GradingBackend:
    """The grading resource of a pass: a local grader, or a device run's records when the settings name them."""
    kind, extra = ((RecordedGrader, {"records": settings.device_records}) if settings.device_records
                   else (GradingBackend, {}))
    return kind(mode=settings.revalidation_mode if revalidation else settings.grader_mode,
                workers=settings.workers, timeout_s=settings.timeout_s,
                profile=settings.profile, retries=settings.retries, task_files=list(settings.task_files),
                compile_cache=settings.compile_cache, **extra)
