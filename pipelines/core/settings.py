"""The project's settings: every `KERNELTRAJ_*` variable is read here, once, so the CLI, `dg dev` and the
tests build the same Definitions from the same place."""
from __future__ import annotations

import importlib.metadata
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.core import import_registry, warehouse

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
