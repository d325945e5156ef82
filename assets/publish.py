"""Stage 9, publish: the latest (or a named) release folder as one tagged commit of a Hub dataset repo.

Not part of `release_job`: publishing leaves the machine, so it runs only when asked (`publish_job`,
`kerneltraj publish`). What a publish left on the Hub is recorded beside the release folder in
`<releases_dir>/<version>.published.json` (outside the folder, so the record never becomes part of
the content it describes) and in the materialisation's metadata.
"""

import dataclasses
import datetime as dt
import os
from pathlib import Path

import dagster as dg
from dagster import AssetExecutionContext

from assets.common import GROUP_RELEASE, OWNER, check_result
from pipelines.publishing.hub import HUB_MANAGED_FILES, UNCONFIGURED, HubPublisher
from pipelines.publishing.publish_record import read_publish_record, write_publish_record
from pipelines.defs.resources import PublishGate, ReleaseTarget, Warehouse
from pipelines.core.warehouse import load_sql, query_dicts


class PublishConfig(dg.Config):
    """Which release to publish."""

    version: str = ""
    """Release version folder to publish; empty means the latest release recorded in the warehouse."""


class PublishRefused(RuntimeError):
    """The release is not fit to publish (a blocking check failed or never ran); nothing was sent."""


def check_gate(instance: dg.DagsterInstance, gate: PublishGate) -> tuple[dict[str, bool], list[str]]:
    """Latest outcome of each blocking check (True = passed) and the checks that bar a publish."""
    keys = [dg.AssetCheckKey(dg.AssetKey.from_user_string(asset), check)
            for asset, _, check in (name.rpartition(":") for name in gate.blocking_checks)]
    if not keys:  # wired without the release's checks: nothing would gate it
        return {}, ["no blocking check to consult (publish through `publish_job` of the project's definitions)"]
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(keys)
    outcome: dict[str, bool] = {}
    barred: list[str] = []
    for key in keys:
        name = key.to_user_string()
        rec = latest.get(key)
        passed = rec is not None and rec.status.value == "SUCCEEDED"  # by value: the enum is not public API
        outcome[name] = passed
        if not passed:
            barred.append(f"{name} ({'never ran' if rec is None else rec.status.value.lower()})")
    return outcome, barred


def _release_to_publish(warehouse: Warehouse, releases_dir: Path, version: str) -> tuple[str, Path]:
    if version:
        return version, releases_dir / version
    with warehouse.connect(read_only=True) as con:
        latest = query_dicts(con, load_sql("release.latest"))
    if not latest:
        raise PublishRefused("no release recorded in the warehouse: run `kerneltraj release` first")
    return latest[0]["version"], Path(latest[0]["path"])


@dg.asset(
    deps=["release"],
    group_name=GROUP_RELEASE,
    owners=[OWNER],
    kinds={"huggingface"},
    code_version="1",
    description="The release published to a Hugging Face Hub dataset repo as one commit plus a version tag "
                "(idempotent: a re-publish of the same content makes no commit). Runs only in `publish_job`, "
                "never after a failed blocking check.",
)
def published_release(context: AssetExecutionContext, config: PublishConfig, hub: HubPublisher,
                      publish_gate: PublishGate, warehouse: Warehouse,
                      release_target: ReleaseTarget) -> dg.MaterializeResult:
    if not hub.repo_id:
        raise PublishRefused(UNCONFIGURED)
    releases_dir = Path(release_target.releases_dir)
    version, folder = _release_to_publish(warehouse, releases_dir, config.version)
    # A run holding `release` would already have skipped this step after a failed blocking check; a
    # publish_job run holds only this asset, so it asks the instance for the checks' latest outcomes.
    checks, barred = check_gate(context.instance, publish_gate)
    if barred:
        raise PublishRefused(f"release {version} not published: blocking checks did not pass: {', '.join(barred)}; "
                             "fix them and run `kerneltraj release` again")
    result = hub.publish(folder, version)
    record = {**dataclasses.asdict(result), "files": list(result.files), "endpoint": hub.endpoint,
              "version": version, "path": str(folder), "run_id": context.run.run_id,
              "published_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "checks": checks}
    out = write_publish_record(folder.parent, version, record)  # beside the folder published, where status looks
    context.log.info(f"release {version} published to {hub.repo_id}@{result.tag} ({result.commit_sha[:12]}, "
                     f"{'new commit' if result.created_commit else 'no new commit'})")
    return dg.MaterializeResult(metadata={
        "repo_id": dg.MetadataValue.text(result.repo_id),
        "endpoint": dg.MetadataValue.url(hub.endpoint),
        "tag": dg.MetadataValue.text(result.tag),
        "commit_sha": dg.MetadataValue.text(result.commit_sha),
        "created_commit": dg.MetadataValue.bool(result.created_commit),
        "files": dg.MetadataValue.json(list(result.files)),
        "record": dg.MetadataValue.path(str(out)),
    })


@dg.asset_check(asset=published_release, blocking=False,
                description="Read back from the Hub: the version tag names the recorded commit, and that commit "
                            "holds exactly the release's files (plus Hub-managed ones).")
def hub_tag_matches_release(hub: HubPublisher, warehouse: Warehouse,
                            release_target: ReleaseTarget) -> dg.AssetCheckResult:
    from huggingface_hub import HfApi  # imported late, like the publisher itself

    with warehouse.connect(read_only=True) as con:
        latest = query_dicts(con, load_sql("release.latest"))
    folders = [Path(r["path"]) for r in latest] + sorted(Path(release_target.releases_dir).glob("v*"))
    records = [r for r in (read_publish_record(f.parent, f.name) for f in folders if f.is_dir()) if r]
    if not records:
        return check_result([{"problem": "no publish record beside any release"}], "missing publish records")
    rec = max(records, key=lambda r: r["published_at"])  # the record this run just wrote
    api = HfApi(endpoint=rec["endpoint"].rstrip("/"), token=os.environ.get(hub.token_env_var) or False)
    tags = {t.name: t.target_commit for t in api.list_repo_refs(rec["repo_id"], repo_type="dataset").tags}
    problems = []
    if tags.get(rec["tag"]) != rec["commit_sha"]:
        problems.append({"problem": f"tag {rec['tag']} names {tags.get(rec['tag'])}, record says {rec['commit_sha']}"})
    else:
        remote = set(api.list_repo_files(rec["repo_id"], repo_type="dataset", revision=rec["tag"]))
        problems += [{"problem": f"missing on the Hub: {f}"} for f in sorted(set(rec["files"]) - remote)]
        extra = remote - set(rec["files"]) - HUB_MANAGED_FILES
        problems += [{"problem": f"not in the release: {f}"} for f in sorted(extra)]
    return check_result(problems, "differences between the Hub and the publish record",
                        repo_id=rec["repo_id"], tag=rec["tag"])


CHECKS = [hub_tag_matches_release]
"""Read-back of what a publish left; the publish itself is gated by every blocking check upstream."""
