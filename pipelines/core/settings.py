"""The project's settings: every `KERNELTRAJ_*` variable of the pipeline is read here, once, so the CLI, `dg dev`
and the tests build the same Definitions from the same place.

Paths come from the state folder (KERNELTRAJ_STATE_DIR, default `.kerneltraj` in the folder the command starts
in), never from where the code lies: an installed kerneltraj and a checkout behave alike. Relative paths in a
variable are taken from the folder the command starts in. The demo corpus is package data (`demo`), the
default only while nothing else is given: imported corpora replace it, they never join it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.resources
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipelines.core import import_registry

STATE_DIR_NAME = ".kerneltraj"
"""The state folder's name in the folder a command starts in, when KERNELTRAJ_STATE_DIR is unset."""
DEMO_INPUTS = ("attempts.jsonl", "malformed.jsonl")
"""The demo corpus's attempt files, in the `demo` package."""
DEMO_CHECKPOINTS = ("checkpoints/baseline.jsonl", "checkpoints/treatment.jsonl")
"""The demo's baseline then treatment checkpoint attempts, in the `demo` package."""


def demo_dir() -> Path:
    """The folder of the embedded demo corpus (the `demo` package: a wheel installs it unzipped)."""
    return Path(str(importlib.resources.files("demo")))


def demo_inputs() -> tuple[str, ...]:
    return tuple(str(demo_dir() / name) for name in DEMO_INPUTS)


def demo_checkpoints() -> tuple[str, ...]:
    return tuple(str(demo_dir() / name) for name in DEMO_CHECKPOINTS)


@dataclass(frozen=True)
class Settings:
    """Where kerneltraj keeps its state and how it grades; every field has an env override."""

    state_dir: Path
    """Project-local state folder (KERNELTRAJ_STATE_DIR, default ./.kerneltraj where the command starts)."""
    warehouse_path: Path
    """DuckDB file (KERNELTRAJ_WAREHOUSE, default <state>/warehouse.duckdb)."""
    releases_dir: Path
    """Release folders (KERNELTRAJ_RELEASES, default <state>/releases)."""
    splits_dir: Path
    """Frozen split manifests (KERNELTRAJ_SPLITS, default <state>/splits)."""
    inputs: tuple[str, ...]
    """Raw attempt JSONL files (KERNELTRAJ_INPUTS, os.pathsep-separated); unset: the imported corpora, or the
    embedded demo corpus when nothing was imported."""
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
    compile_cache: str = ""
    """Folder of extension builds shared across attempts of one program, or `off` (KERNELTRAJ_COMPILE_CACHE;
    empty: a per-uid folder under the temp dir)."""
    device_records: str = ""
    """Records folder of a device run (KERNELTRAJ_DEVICE_RECORDS): every grade of the release is taken from it
    (pipelines.grading.recorded) instead of a local grader; empty: grade here."""
    checkpoints: tuple[str, ...] = field(default_factory=demo_checkpoints)
    """Baseline then treatment checkpoint attempt files of the learning comparison (KERNELTRAJ_CHECKPOINTS,
    os.pathsep-separated; default the demo's)."""
    replay_settings: tuple[str, ...] = ()
    """Sharing settings the contention replay runs (KERNELTRAJ_REPLAY_SETTINGS, comma-separated names of
    `pipelines.grading.replay.Setting`, checked where the release's run config is made: `defs.release_run_config`;
    isolated always runs first); empty: all five. A release's own run config (`contention_replay`'s `settings`)
    still overrides it."""

    @staticmethod
    def from_env(env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        state = _path(env.get("KERNELTRAJ_STATE_DIR")) or Path.cwd() / STATE_DIR_NAME
        imported = import_registry.files_by_kind(state)
        inputs = _paths(env.get("KERNELTRAJ_INPUTS")) or imported["attempts"] or demo_inputs()
        tasks = _paths(env.get("KERNELTRAJ_TASK_FILES")) or imported["tasks"]
        quarantine = _paths(env.get("KERNELTRAJ_QUARANTINE_FILES")) or imported["quarantine"]
        return Settings(
            state_dir=state,
            warehouse_path=_path(env.get("KERNELTRAJ_WAREHOUSE")) or state / "warehouse.duckdb",
            releases_dir=_path(env.get("KERNELTRAJ_RELEASES")) or state / "releases",
            splits_dir=_path(env.get("KERNELTRAJ_SPLITS")) or state / "splits",
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
            compile_cache=env.get("KERNELTRAJ_COMPILE_CACHE", ""),
            device_records=str(_path(env.get("KERNELTRAJ_DEVICE_RECORDS")) or ""),
            checkpoints=_paths(env.get("KERNELTRAJ_CHECKPOINTS")) or demo_checkpoints(),
            replay_settings=tuple(n.strip() for n in env.get("KERNELTRAJ_REPLAY_SETTINGS", "").split(",") if n.strip()),
        )

    @staticmethod
    def from_env_with(state_dir: str | None = None, warehouse: str | None = None) -> "Settings":
        """The environment's settings with a state folder and warehouse given on the command line: everything
        found in a state folder (its imports above all) comes from the one given, and a state folder without a
        warehouse means the warehouse and releases inside it."""
        env = dict(os.environ)
        if state_dir:
            env["KERNELTRAJ_STATE_DIR"] = str(Path(state_dir).resolve())
            env.pop("KERNELTRAJ_WAREHOUSE", None)
            env.pop("KERNELTRAJ_RELEASES", None)
        if warehouse:
            env["KERNELTRAJ_WAREHOUSE"] = str(Path(warehouse).resolve())
        return Settings.from_env(env)

    def path_env(self) -> dict[str, str]:
        """The variables that give another process (the UI's code server) these settings' state paths."""
        return {"KERNELTRAJ_STATE_DIR": str(self.state_dir), "KERNELTRAJ_WAREHOUSE": str(self.warehouse_path),
                "KERNELTRAJ_RELEASES": str(self.releases_dir), "KERNELTRAJ_SPLITS": str(self.splits_dir)}


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


def _path(value: str | None) -> Path | None:
    """An absolute path from a variable (relative to the folder the command starts in), None when unset."""
    return Path(value).absolute() if value else None


def _paths(value: str | None) -> tuple[str, ...]:
    return tuple(str(Path(p).absolute()) for p in (value or "").split(os.pathsep) if p)


def default_release_version() -> str:
    try:
        return "v" + importlib.metadata.version("kerneltraj")
    except importlib.metadata.PackageNotFoundError:
        return "v0.0.0"

