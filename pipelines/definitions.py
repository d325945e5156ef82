"""Dagster Definitions for kerneltraj: the assets, their checks, the resources and `release_job`.

Loadable by `dg dev` ([tool.dg] defs_module) and `dagster-webserver -m pipelines.definitions`;
the CLI and the tests build their own with `build_defs(settings)`.
"""
from __future__ import annotations

import dagster as dg

from assets import ASSETS, CHECKS
from pipelines.resources import (AttemptSources, ReleaseTarget, Settings, Warehouse, backend_from)

RELEASE_JOB = "release_job"

release_job = dg.define_asset_job(
    RELEASE_JOB,
    selection=dg.AssetSelection.all(),
    description="Materialise a complete dataset release: ingest, grade, trajectories, recheck, splits, "
                "accounting and the parquet + dataset card, with every asset check.",
)


def build_defs(settings: Settings) -> dg.Definitions:
    """Definitions wired to one project's settings (paths and grader options)."""
    return dg.Definitions(
        assets=ASSETS,
        asset_checks=CHECKS,
        jobs=[release_job],
        resources={
            "warehouse": Warehouse(path=str(settings.warehouse_path)),
            "grader": backend_from(settings),
            "regrader": backend_from(settings, revalidation=True),
            "attempt_sources": AttemptSources(paths=list(settings.inputs), task_files=list(settings.task_files),
                                              quarantine_files=list(settings.quarantine_files)),
            "release_target": ReleaseTarget(releases_dir=str(settings.releases_dir), version=settings.release_version,
                                            splits_dir=str(settings.splits_dir)),
        },
        # One step at a time: the DuckDB warehouse has a single writer, and grading holds the GPU pool.
        executor=dg.in_process_executor,
    )


defs = build_defs(Settings.from_env())
