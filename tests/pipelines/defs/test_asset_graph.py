"""The asset graph is a reviewed contract: keys, dependencies, pools and checks are snapshotted.

A change in lineage fails here until the snapshot is regenerated on purpose:
    KERNELTRAJ_UPDATE_SNAPSHOTS=1 python3 -m pytest tests/pipelines/defs/test_asset_graph.py
and the diff of tests/snapshots/asset_graph.json is reviewed with the change.
"""
from __future__ import annotations

import json
import os

import dagster as dg

from pipelines.defs.definitions import RELEASE_JOB, build_defs
from pipelines.core.settings import Settings
from tests.conftest import REPO_ROOT

SNAPSHOT = REPO_ROOT / "tests" / "snapshots" / "asset_graph.json"


def _defs() -> dg.Definitions:
    return build_defs(Settings.from_env({}))


def graph_snapshot(defs: dg.Definitions) -> dict:
    """Everything about the graph a reviewer should see change: assets, deps, groups, pools, checks."""
    graph = defs.resolve_asset_graph()
    checks: dict[str, list[dict]] = {}
    for spec in graph.asset_check_keys:
        node = graph.get_check_spec(spec)
        checks.setdefault(spec.asset_key.to_user_string(), []).append(
            {"name": spec.name, "blocking": bool(node.blocking)})
    assets = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        assets[key.to_user_string()] = {
            "deps": sorted(k.to_user_string() for k in node.parent_keys),
            "group": node.group_name,
            "pools": sorted(node.pools or ()),
            "checks": sorted(checks.get(key.to_user_string(), []), key=lambda c: c["name"]),
        }
    job = defs.resolve_job_def(RELEASE_JOB)
    job_assets = sorted(k.to_user_string() for k in job.asset_layer.executable_asset_keys)
    return {"assets": assets, "jobs": {RELEASE_JOB: job_assets}}


def test_asset_graph_matches_snapshot():
    snap = graph_snapshot(_defs())
    if os.environ.get("KERNELTRAJ_UPDATE_SNAPSHOTS"):
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(json.dumps(snap, indent=2, sort_keys=True) + "\n")
    assert SNAPSHOT.exists(), "no snapshot yet: run with KERNELTRAJ_UPDATE_SNAPSHOTS=1 and review it"
    assert snap == json.loads(SNAPSHOT.read_text()), (
        "the asset graph changed; if intended, regenerate with KERNELTRAJ_UPDATE_SNAPSHOTS=1 and review the diff")


def test_every_asset_is_documented_owned_versioned_and_checked():
    defs = _defs()
    graph = defs.resolve_asset_graph()
    checked = {k.asset_key for k in graph.asset_check_keys}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        assert node.description and len(node.description) > 40, key
        assert node.owners == ["team:kerneltraj"], key
        assert node.kinds, key
        assert node.code_version, key
        assert key in checked, f"{key.to_user_string()} has no asset check"


def test_release_is_gated_by_blocking_checks_upstream():
    """The ledger conservation and the cheat checks block, and the release depends on their assets."""
    snap = graph_snapshot(_defs())["assets"]
    blocking = {(a, c["name"]) for a, v in snap.items() for c in v["checks"] if c["blocking"]}
    assert ("accounting", "ledger_conservation") in blocking
    assert ("graded_attempts", "cheats_at_floor") in blocking
    assert ("revalidated_records", "revalidation_cheats_at_floor") in blocking

    def upstream(key: str) -> set[str]:
        seen, todo = set(), [key]
        while todo:
            for d in snap[todo.pop()]["deps"]:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return seen

    assert {"accounting", "graded_attempts", "revalidated_records", "raw_attempts", "family_splits",
            "trajectories"} <= upstream("release")
    assert snap["graded_attempts"]["pools"] == ["gpu"] and snap["revalidated_records"]["pools"] == ["gpu"]
    # Everything but publishing: nothing leaves the machine in a release run.
    assert set(graph_snapshot(_defs())["jobs"][RELEASE_JOB]) == set(snap) - {"published_release"}


def test_definitions_module_loads_for_the_ui():
    import importlib

    mod = importlib.import_module("pipelines.defs.definitions")
    assert isinstance(mod.defs, dg.Definitions)
    assert mod.defs.resolve_job_def(RELEASE_JOB) is not None
