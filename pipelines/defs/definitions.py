"""Dagster Definitions for kerneltraj: the assets, their checks, the resources and `release_job`.

Loadable by `dg dev` ([tool.dg] defs_module) and `dagster-webserver -m pipelines.defs.definitions`;
the CLI and the tests build their own with `build_defs(settings)`.
"""
from __future__ import annotations

import dagster as dg

from assets import ASSETS, CHECKS, PUBLISH_ASSETS
from pipelines.publishing.hub import HubPublisher
from pipelines.core.settings import Settings, SettingsError
from pipelines.grading.replay import Setting
from pipelines.defs.resources import AttemptSources, PublishGate, ReleaseTarget, Warehouse, backend_from

RELEASE_JOB = "release_job"
PUBLISH_JOB = "publish_job"


def release_run_config(settings: Settings) -> dict:
    """The release's run config as the settings choose it (the contention replay's sharing settings); empty: every
    asset's own defaults."""
    if not settings.replay_settings:
        return {}
    known = [s.value for s in Setting]
    unknown = [n for n in settings.replay_settings if n not in known]
    if unknown:
        raise SettingsError(f"KERNELTRAJ_REPLAY_SETTINGS={','.join(settings.replay_settings)!r} names "
                            f"{', '.join(map(repr, unknown))}, which the contention replay does not know; use a "
                            f"comma-separated subset of {', '.join(known)}, or unset it for all five")
    return {"ops": {"contention_replay": {"config": {"settings": list(settings.replay_settings)}}}}


def release_job_for(settings: Settings) -> dg.UnresolvedAssetJobDefinition:
    """The release job, its run config defaulting to `release_run_config` (the launchpad starts from it)."""
    return dg.define_asset_job(
        RELEASE_JOB,
        # Everything except publishing, which leaves the machine and runs only when asked.
        selection=dg.AssetSelection.all() - dg.AssetSelection.assets(*PUBLISH_ASSETS),
        description="Materialise a complete dataset release: ingest, grade, trajectories, recheck, splits, "
                    "accounting and the parquet + dataset card, with every asset check.",
        config=release_run_config(settings) or None,
    )


publish_job = dg.define_asset_job(
    PUBLISH_JOB,
    selection=dg.AssetSelection.assets(*PUBLISH_ASSETS),
    description="Publish the latest release (or run config `version`) to the Hub as a tagged commit; refused "
                "while any blocking check's latest outcome is not a pass.",
)


def blocking_checks(checks: list[dg.AssetChecksDefinition]) -> list[str]:
    """`asset:check` names of the blocking checks among `checks`: what a publish waits on."""
    return sorted(f"{spec.key.asset_key.to_user_string()}:{spec.key.name}" for c in checks for spec in c.check_specs
                  if spec.blocking)


def build_defs(settings: Settings) -> dg.Definitions:
    """Definitions wired to one project's settings (paths and grader options)."""
    return dg.Definitions(
        assets=[*ASSETS, *PUBLISH_ASSETS],
        asset_checks=CHECKS,
        jobs=[release_job_for(settings), publish_job],
        resources={
            "warehouse": Warehouse(path=str(settings.warehouse_path)),
            "grader": backend_from(settings),
            "regrader": backend_from(settings, revalidation=True),
            "attempt_sources": AttemptSources(paths=list(settings.inputs), task_files=list(settings.task_files),
                                              quarantine_files=list(settings.quarantine_files)),
            "release_target": ReleaseTarget(releases_dir=str(settings.releases_dir), version=settings.release_version,
                                            splits_dir=str(settings.splits_dir)),
            "hub": HubPublisher(endpoint=settings.hub_endpoint, repo_id=settings.hub_repo),
            "publish_gate": PublishGate(blocking_checks=blocking_checks(CHECKS)),
        },
        # One step at a time: the DuckDB warehouse has a single writer, and grading holds the GPU pool.
        executor=dg.in_process_executor,
    )


defs = build_defs(Settings.from_env())
