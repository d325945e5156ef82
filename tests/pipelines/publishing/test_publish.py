"""Publishing a real (small) release through `kerneltraj publish` and the `published_release` asset to a
local Hub on 127.0.0.1 (tests/hub_server.py, git-backed), then loading it back with `datasets`.

The release is materialised once per pytest session by the real CLI on a slice of the demo corpus
(`release_project` in tests/conftest.py, also read by tests/assets/test_pipeline.py and
tests/pipelines/defs/test_browser.py). The first publish runs `kerneltraj publish` in a process of its own, as a
user does; the other commands run in this process (tests/conftest.py `run_cli`), and `datasets` reads the
published release once, in one fresh process, for every test that looks at it (`from_hub`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from tests.hub_server import LocalHub
from pipelines.core.settings import Settings
from tests.conftest import CUDA_ATTEMPT, HELDOUT_TASK, REPO_ROOT, VALIDATION_TASK, release_env, run_cli

pytestmark = pytest.mark.hub

TOKEN = "hf_local_publish_token"
REPO = "kerneltraj/publish-test"


@pytest.fixture(scope="module")
def project(release_project) -> Path:
    """The folder of the session's shared release (tests/conftest.py `release_project`)."""
    return release_project.root


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with LocalHub(tmp_path_factory.mktemp("hub"), token=TOKEN) as server:
        yield server


def cli(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kerneltraj ARGS` on the project at `root`, in this process."""
    return run_cli(env or release_env(root), *args, cwd=root)


def hub_env(root: Path, hub: LocalHub) -> dict[str, str]:
    return {**release_env(root), "HF_TOKEN": TOKEN, "KERNELTRAJ_HUB_ENDPOINT": hub.url,
            "KERNELTRAJ_HUB_REPO": REPO}


def api(hub: LocalHub):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=TOKEN)


def n_commits(hub: LocalHub) -> int:
    return len(api(hub).list_repo_commits(REPO, repo_type="dataset"))


def release_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def test_default_version_is_a_hub_version():
    from pipelines.publishing.hub import VERSION_RE

    assert VERSION_RE.fullmatch(Settings.from_env({}).release_version)


def test_unconfigured_publish_says_what_to_set(project):
    proc = cli(project, "publish")
    assert proc.returncode == 2
    assert "KERNELTRAJ_HUB_REPO" in proc.stderr and "HF_TOKEN" in proc.stderr


def test_dry_run_writes_the_exact_commit_without_network(project, tmp_path):
    # An endpoint nothing listens on: any request would fail the command.
    env = {**release_env(project), "KERNELTRAJ_HUB_ENDPOINT": "http://127.0.0.1:9", "KERNELTRAJ_HUB_REPO": REPO}
    proc = cli(project, "publish", "--dry-run", str(tmp_path / "dry"), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((tmp_path / "dry" / "manifest.json").read_text())
    folder = Settings.from_env(env).releases_dir / "v0.1.0"
    assert manifest["tag"] == "v0.1.0" and manifest["repo_id"] == REPO
    assert sorted(op["path"] for op in manifest["operations"]) == release_files(folder)
    for op in manifest["operations"]:
        assert (tmp_path / "dry" / "files" / op["path"]).read_bytes() == (folder / op["path"]).read_bytes()


def test_publish_tags_one_commit_and_republish_makes_none(project, hub, monkeypatch):
    env = hub_env(project, hub)
    first = subprocess.run([sys.executable, "-m", "pipelines.cli", "publish"], env=env, cwd=project,
                           capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr[-3000:]
    rec = json.loads(first.stdout)
    folder = Settings.from_env(env).releases_dir / "v0.1.0"
    assert rec["created_commit"] is True and rec["repo_id"] == REPO and rec["tag"] == "v0.1.0"
    assert rec["files"] == release_files(folder)
    tags = {t.name: t.target_commit for t in api(hub).list_repo_refs(REPO, repo_type="dataset").tags}
    assert tags == {"v0.1.0": rec["commit_sha"]}
    remote = set(api(hub).list_repo_files(REPO, repo_type="dataset", revision="v0.1.0"))
    assert set(rec["files"]) <= remote and remote - set(rec["files"]) <= {".gitattributes"}
    commits = n_commits(hub)
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    with dg.DagsterInstance.get() as instance:
        key = dg.AssetCheckKey(dg.AssetKey("published_release"), "hub_tag_matches_release")
        readback = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])[key]
    assert readback.status.value == "SUCCEEDED"

    second = cli(project, "publish", "--version", "v0.1.0", "--endpoint", hub.url, "--repo", REPO,
                 env={k: v for k, v in env.items() if not k.startswith("KERNELTRAJ_HUB_")})
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)
    assert again["created_commit"] is False and again["commit_sha"] == rec["commit_sha"]
    assert n_commits(hub) == commits

    status = json.loads(cli(project, "status", "--json", env=env).stdout)["release"]
    assert status["version"] == "v0.1.0" and status["files"] == rec["files"]
    pub = status["published"]
    assert (pub["repo"], pub["tag"], pub["commit"]) == (REPO, "v0.1.0", rec["commit_sha"])
    assert pub["files"] == rec["files"] and pub["created_commit"] is False
    assert pub["checks"] and all(c["passed"] is True for c in pub["checks"])
    assert any(c["name"] == "release:release_matches_warehouse" for c in pub["checks"])


@pytest.fixture(scope="module")
def from_hub(project, hub, tmp_path_factory) -> dict:
    """What the real `datasets` reads from the local Hub at v0.1.0, in one fresh process: every config (`default`
    for the one a plain `load_dataset(repo)` gives), each split's columns and rows; and `old_config`, whether the
    former `trajectories_test_heldout` config still loads."""
    if not (Settings.from_env(hub_env(project, hub)).releases_dir / "v0.1.0.published.json").is_file():
        pytest.fail("run with test_publish_tags_one_commit_and_republish_makes_none: nothing published yet")
    code = f"""
        import json, datasets
        out = {{"configs": {{}}}}
        for config in (None, "attempts", "grades", "revalidated", "tasks", "splits"):
            ds = datasets.load_dataset({REPO!r}, config, revision="v0.1.0")
            out["configs"][config or "default"] = {{name: {{"columns": d.column_names, "rows": d.to_list()}}
                                                   for name, d in ds.items()}}
        try:
            datasets.load_dataset({REPO!r}, "trajectories_test_heldout", revision="v0.1.0")
            out["old_config"] = True
        except ValueError:
            out["old_config"] = False
        print(json.dumps(out, default=str))
    """
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0",
           "HF_HOME": str(tmp_path_factory.mktemp("hf_home")), "HF_TOKEN": TOKEN, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def rows_of(got: dict, config: str) -> list[dict]:
    """Every row of one config, over its splits."""
    return [r for split in got["configs"][config].values() for r in split["rows"]]


def test_published_config_loads_with_datasets(project, from_hub):
    grades = from_hub["configs"]["grades"]
    configs = json.loads(cli(project, "status", "--json").stdout)["release"]["configs"]
    assert len(rows_of(from_hub, "grades")) == configs["grades"] > 0
    assert {"attempt_id", "grading_pass", "reward", "status", "backend", "graded_here", "split"} <= set(
        grades["train"]["columns"])


def test_default_config_has_real_splits_and_no_heldout_task_outside_test_heldout(from_hub):
    """What `datasets.load_dataset(repo)` gives a lab: train / validation / test_heldout, each row in its own
    split, and no task of a held-out family or lineage anywhere but test_heldout, in any config."""
    from pipelines.curation.split_policy import DEFAULT_POLICY

    got = {config: {name: split["rows"] for name, split in splits.items()}
           for config, splits in from_hub["configs"].items()}
    assert from_hub["old_config"] is False  # the split is a split now, not a config holding a `train` split
    assert set(got["default"]) == {"train", "validation", "test_heldout"}
    manifest = got["splits"]
    held_out = {r["task_id"] for rows in manifest.values() for r in rows
                if r["family"] in DEFAULT_POLICY.held_out_families or r["lineage"] in DEFAULT_POLICY.held_out_lineages}
    assert HELDOUT_TASK in held_out
    for config, splits in got.items():
        for name, rows in splits.items():
            assert rows and all(r["split"] == name for r in rows), (config, name)
            if name != "test_heldout":
                assert not {r["task_id"] for r in rows} & held_out, (config, name)
    tasks = {name: {r["task_id"] for r in rows} for name, rows in got["default"].items()}
    assert HELDOUT_TASK in tasks["test_heldout"] and VALIDATION_TASK in tasks["validation"]


def test_every_reward_says_where_it_was_measured_and_if_it_was_rechecked(project, from_hub):
    from pipelines.reporting.release_card import REVALIDATION_STATES

    got = {"turns": [t for r in rows_of(from_hub, "default") for t in r["turns"]],
           **{config: rows_of(from_hub, config) for config in ("grades", "revalidated", "attempts")}}
    turns = {t["attempt_id"]: t for t in got["turns"]}
    assert len(turns) == len((project / "attempts.jsonl").read_text().splitlines())
    for t in turns.values():
        assert t["backend"] == "cpu" and t["device"] == "cpu", t
        assert t["revalidation_state"] in REVALIDATION_STATES, t
    cuda = turns[CUDA_ATTEMPT]
    assert cuda["status"] == "unsupported_on_backend" and cuda["reward"] is None
    assert (cuda["reward_kind"], cuda["revalidation_state"]) == ("not_graded_here", "not_rechecked")
    graded = [t for a, t in turns.items() if a != CUDA_ATTEMPT]
    assert all(t["reward"] is not None for t in graded)
    assert all(t["reward_kind"] == ("cpu_timing_not_a_speedup" if t["status"] == "correct" else "floor")
               for t in graded)
    cuda_grades = [g for g in got["grades"] if g["attempt_id"] == CUDA_ATTEMPT]
    assert cuda_grades and all(g["reward"] is None and g["graded_here"] is False for g in cuda_grades)
    assert all(g["reward"] is not None and g["graded_here"] is True and g["backend"] == "cpu"
               for g in got["grades"] if g["attempt_id"] != CUDA_ATTEMPT)
    # every other published reward (and each attempt) says the same of its attempt as its turn does
    for g in got["grades"]:
        assert g["revalidation_state"] == turns[g["attempt_id"]]["revalidation_state"], g
        if g["grading_pass"] == "primary":
            assert g["reward_kind"] == turns[g["attempt_id"]]["reward_kind"], g
    assert got["revalidated"] and all(
        (r["primary_reward"], r["reward_kind"], r["primary_backend"], r["revalidation_state"]) ==
        tuple(turns[r["attempt_id"]][k] for k in ("reward", "reward_kind", "backend", "revalidation_state"))
        for r in got["revalidated"])
    assert {a["attempt_id"]: a["revalidation_state"] for a in got["attempts"]} == {
        a: t["revalidation_state"] for a, t in turns.items()}


def test_release_card_describes_every_column_and_names_each_sources_licence(project):
    """Every column of every config's parquet carries a description, in its field metadata and in the card;
    the card's licences are those of the sources the release holds; it pins the commit and manifest."""
    import pyarrow.parquet as pq
    import yaml

    from pipelines.publishing.release_files import CONFIGS, config_shards
    from pipelines.core.markup import card_body
    from pipelines.reporting.release_card import describe, licences

    folder = Settings.from_env(release_env(project)).releases_dir / "v0.1.0"
    card = (folder / "README.md").read_text()
    front, body = yaml.safe_load(card.split("---\n")[1]), card_body(card)
    for config in CONFIGS:
        shards = config_shards(folder, config)
        assert shards, config
        section = body.split(f"### `{config}`", 1)[1].split("\n### ", 1)[0]
        for shard in shards:
            for field in pq.read_schema(shard):
                text = (field.metadata or {}).get(b"description", b"").decode()
                assert text and text == describe(config, field.name), (config, field.name)
                assert f"| {field.name} |" in section, (config, field.name)
    formats = {json.loads(ln).get("source_format", "kerneltraj")
               for ln in (project / "attempts.jsonl").read_text().splitlines() if ln.strip()}
    assert formats == {"kerneltraj"} and front["kerneltraj"]["sources"] == ["kerneltraj"]
    assert front["license"] == licences(["kerneltraj"])[0]["license"] == "apache-2.0"
    assert "kerneltraj contributors" in (folder / "NOTICE").read_text()
    manifest = json.loads((REPO_ROOT / "splits" / "split_manifest-v1.json").read_text())["content_hash"]
    assert front["kerneltraj"]["split_manifest"]["sha256"] == manifest and manifest in body
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", front["kerneltraj"]["code_commit"])
    assert front["kerneltraj"]["code_commit"] in body
    for text in ("datasets.load_dataset(", "## Limitations", "## Citation", "trajectories.turns[].attempt_id",
                 "[-6, 3]", "CPU release: its speed rewards are not speedups"):
        assert text in body, text


def test_failed_blocking_check_means_no_publish(project, hub, tmp_path, monkeypatch):
    """A planted failing expectation in the trajectories quality gate: Dagster skips the publish step of a
    run holding the whole graph, and `kerneltraj publish` refuses while that check's latest outcome is a fail."""
    from assets import ASSETS, CHECKS, PUBLISH_ASSETS
    from pipelines.defs import quality
    from pipelines.defs.definitions import build_defs

    copy = tmp_path / "copy"  # the shared project stays green for the other tests
    shutil.copytree(project, copy)
    env = hub_env(copy, hub) | {"KERNELTRAJ_HUB_REPO": "kerneltraj/never-published"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    planted = quality.TABLE_RULES["trajectories"]
    monkeypatch.setitem(quality.TABLE_RULES, "trajectories",
                        dataclasses.replace(planted, min_rows=10**9))
    defs = build_defs(Settings.from_env(env))
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([*ASSETS, *PUBLISH_ASSETS, *CHECKS], instance=instance, resources=defs.resources,
                                raise_on_error=False)
    evals = {(e.asset_key.to_user_string(), e.check_name): e.passed for e in result.get_asset_check_evaluations()}
    assert evals[("trajectories", "quality_gate")] is False
    assert evals[("graded_attempts", "quality_gate")] is True
    done = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "trajectories" in done and "release" not in done and "published_release" not in done
    refused = cli(copy, "publish", env=env)
    assert refused.returncode == 1
    assert "trajectories:quality_gate" in refused.stderr and "not published" in refused.stderr
    assert not api(hub).repo_exists("kerneltraj/never-published", repo_type="dataset")
