"""Dagster resources: the grading backend in front of the sealed grader, and the warehouse file.

Also the project's settings (paths, grader options) read once from the environment, so the
CLI, `dg dev` and the tests build the same Definitions from the same place.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import dagster as dg
import duckdb

from grader.contract import GradeRequest, GradeResult, Status
from pipelines import import_registry, warehouse

REPO_ROOT = warehouse.REPO_ROOT
DEFAULT_INPUTS = ("demo/attempts.jsonl", "demo/malformed.jsonl")
DEFAULT_CHECKPOINTS = ("demo/checkpoints/baseline.jsonl", "demo/checkpoints/treatment.jsonl")


@dataclass(frozen=True)
class Settings:
    """Where kerneltraj keeps its state and how it grades; every field has an env override."""

    state_dir: Path
    """Project-local state folder (KERNELTRAJ_STATE_DIR, default <repo>/.kerneltraj)."""
    warehouse_path: Path
    """DuckDB file (KERNELTRAJ_WAREHOUSE, default <state>/warehouse.duckdb)."""
    releases_dir: Path
    """Release folders (KERNELTRAJ_RELEASES, default <state>/releases)."""
    splits_dir: Path
    """Frozen split manifests (KERNELTRAJ_SPLITS, default <repo>/splits)."""
    inputs: tuple[str, ...]
    """Raw attempt JSONL files (KERNELTRAJ_INPUTS, os.pathsep-separated; relative to the repo)."""
    task_files: tuple[str, ...]
    """Extra task-card JSONL files written by importers (KERNELTRAJ_TASK_FILES)."""
    quarantine_files: tuple[str, ...]
    """JSONL of rows importers refused, carried into the quarantine table (KERNELTRAJ_QUARANTINE_FILES)."""
    grader_mode: str
    """`zygote` or `fresh` for the primary pass (KERNELTRAJ_GRADER_MODE)."""
    revalidation_mode: str
    """`zygote` or `fresh` for the independent recheck (KERNELTRAJ_REVALIDATION_MODE)."""
    workers: int
    """Grader worker processes (KERNELTRAJ_WORKERS)."""
    timeout_s: float
    """Wall-clock budget per attempt, seconds (KERNELTRAJ_TIMEOUT_S)."""
    profile: str
    """Size profile `auto`, `cpu` or `gpu` (KERNELTRAJ_PROFILE)."""
    retries: int
    """Extra tries for an attempt the grader could not judge (infra_error) (KERNELTRAJ_RETRIES)."""
    release_version: str
    """Version folder and tag of the release (KERNELTRAJ_RELEASE_VERSION, default v<package version>)."""
    hub_endpoint: str = "https://huggingface.co"
    """Hub base URL releases are published to (KERNELTRAJ_HUB_ENDPOINT); the write token is read from HF_TOKEN."""
    hub_repo: str = ""
    """Hub dataset repo `namespace/name` (KERNELTRAJ_HUB_REPO); empty: publishing is not configured."""
    checkpoints: tuple[str, ...] = DEFAULT_CHECKPOINTS
    """Baseline then treatment checkpoint attempt files of the learning comparison (KERNELTRAJ_CHECKPOINTS,
    os.pathsep-separated; relative to the repo)."""

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        state = Path(env.get("KERNELTRAJ_STATE_DIR") or REPO_ROOT / ".kerneltraj")
        imported = import_registry.files_by_kind(state)
        inputs = _paths(env.get("KERNELTRAJ_INPUTS")) or DEFAULT_INPUTS + imported["attempts"]
        tasks = _paths(env.get("KERNELTRAJ_TASK_FILES")) or imported["tasks"]
        quarantine = _paths(env.get("KERNELTRAJ_QUARANTINE_FILES")) or imported["quarantine"]
        return Settings(
            state_dir=state,
            warehouse_path=Path(env.get("KERNELTRAJ_WAREHOUSE") or state / "warehouse.duckdb"),
            releases_dir=Path(env.get("KERNELTRAJ_RELEASES") or state / "releases"),
            splits_dir=Path(env.get("KERNELTRAJ_SPLITS") or REPO_ROOT / "splits"),
            inputs=inputs,
            task_files=tasks,
            quarantine_files=quarantine,
            grader_mode=env.get("KERNELTRAJ_GRADER_MODE", "zygote"),
            revalidation_mode=env.get("KERNELTRAJ_REVALIDATION_MODE", "zygote"),
            workers=_number(env, "KERNELTRAJ_WORKERS", "1", int, 1),
            timeout_s=_number(env, "KERNELTRAJ_TIMEOUT_S", "60", float, 1e-3),
            profile=env.get("KERNELTRAJ_PROFILE", "auto"),
            retries=_number(env, "KERNELTRAJ_RETRIES", "1", int, 0),
            release_version=env.get("KERNELTRAJ_RELEASE_VERSION") or default_release_version(),
            hub_endpoint=env.get("KERNELTRAJ_HUB_ENDPOINT") or "https://huggingface.co",
            hub_repo=env.get("KERNELTRAJ_HUB_REPO", ""),
            checkpoints=_paths(env.get("KERNELTRAJ_CHECKPOINTS")) or DEFAULT_CHECKPOINTS,
        )


class SettingsError(ValueError):
    """A KERNELTRAJ_* variable holds a value kerneltraj cannot use (the message names it)."""


def _number(env: dict[str, str], name: str, default: str, kind: type, least: float) -> Any:
    text = env.get(name) or default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or math.isnan(value) or value < least:
        raise SettingsError(f"{name}={text!r} is not a {'whole ' if kind is int else ''}number of at least "
                            f"{least:g}; set it to one, or unset it for the default {default}")
    return value


def _paths(value: str | None) -> tuple[str, ...]:
    return tuple(p for p in (value or "").split(os.pathsep) if p)


def default_release_version() -> str:
    try:
        return "v" + importlib.metadata.version("kerneltraj")
    except importlib.metadata.PackageNotFoundError:
        return "v0.0.0"


def resolve_path(p: str | Path) -> Path:
    """Relative paths are relative to the repository, not to wherever the command was started."""
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p


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
