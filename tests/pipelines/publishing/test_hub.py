"""Publishing releases through the real huggingface_hub/datasets clients to a local Hub on 127.0.0.1.

The local Hub (tests/hub_server.py) keeps each dataset repo as a real bare git repository, so these
tests also check the git history the publisher leaves behind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx2
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from huggingface_hub.errors import RevisionNotFoundError

from pipelines.publishing.hub import HubPublisher, HubPublishError, VersionPinnedError, scan_release
from tests.hub_server import LOST_ANSWER, UNROUTED, LocalHub
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.hub

TOKEN = "hf_local_test_token"
TOKEN_VAR = "KERNELTRAJ_TEST_HUB_TOKEN"
COMMIT_ROUTE = "/api/datasets/{repo}/commit/{rev}"
TAG_ROUTE = "/api/datasets/{repo}/tag/{rev}"


def rows(prefix: str, n: int, reward: float) -> dict[str, list[Any]]:
    return {"attempt_id": [f"{prefix}-{i}" for i in range(n)], "reward": [reward + i for i in range(n)],
            "status": ["correct"] * n}


def write_release(root: Path, configs: dict[str, dict[str, list[Any]]], shards: dict[str, int] | None = None) -> Path:
    """A release dir: parquet shards under data/<config>/ and a card whose front matter declares the configs."""
    card = ["---", "configs:"]
    for name, columns in configs.items():
        n = (shards or {}).get(name, 1)
        table = pa.table(columns)
        (root / "data" / name).mkdir(parents=True)
        step = -(-table.num_rows // n)
        for i in range(n):
            pq.write_table(table.slice(i * step, step), root / "data" / name / f"train-{i:05d}-of-{n:05d}.parquet")
        card += [f"- config_name: {name}", "  data_files:", "  - split: train",
                 f"    path: data/{name}/train-*.parquet"]
    (root / "README.md").write_text("\n".join(card + ["---", "", "# kerneltraj test release", ""]))
    return root


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)


@pytest.fixture
def hub(tmp_path: Path, token_env: None):
    # a page of 3 entries makes every tree listing (publisher and datasets alike) follow Link pagination
    with LocalHub(tmp_path / "hub", token=TOKEN, tree_page_size=3) as server:
        yield server


@pytest.fixture
def lfs_hub(tmp_path: Path, token_env: None, monkeypatch: pytest.MonkeyPatch):
    """A local Hub that sends files >= 1 KB through git-LFS; the client must use LFS, not Xet, for it."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    with LocalHub(tmp_path / "hub", token=TOKEN, lfs_threshold_bytes=1024) as server:
        yield server


def publisher(hub: LocalHub, repo_id: str, **kw: Any) -> HubPublisher:
    return HubPublisher(endpoint=hub.url, repo_id=repo_id, token_env_var=TOKEN_VAR, private=False,
                        timeout_s=20.0, backoff_s=0.01, **kw)


def api(hub: LocalHub):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=TOKEN)


def tags(hub: LocalHub, repo_id: str) -> dict[str, str]:
    return {t.name: t.target_commit for t in api(hub).list_repo_refs(repo_id, repo_type="dataset").tags}


def main_head(hub: LocalHub, repo_id: str) -> str:
    return api(hub).dataset_info(repo_id, revision="main").sha


def n_commits(hub: LocalHub, repo_id: str) -> int:
    return len(api(hub).list_repo_commits(repo_id, repo_type="dataset"))


def repo_files(hub: LocalHub, repo_id: str, revision: str) -> set[str]:
    return set(api(hub).list_repo_files(repo_id, repo_type="dataset", revision=revision))


def run_publish_subprocess(hub: LocalHub, repo_id: str, release: Path, version: str, **env: str) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        from pathlib import Path
        from pipelines.publishing.hub import HubPublisher
        HubPublisher(endpoint={hub.url!r}, repo_id={repo_id!r}, token_env_var={TOKEN_VAR!r}, private=False,
                     backoff_s=0.01).publish(Path({str(release)!r}), {version!r})
    """)
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ, **env})


def kill_at_gate(proc: subprocess.Popen, gate: Any) -> None:
    """SIGKILL the publishing process once its request reached the gate, then drop that request unanswered."""
    arrived = gate.arrived.wait(timeout=90)
    if not arrived:
        proc.kill()
        pytest.fail(f"publish never reached the gate; output:\n{proc.communicate()[0].decode()[-3000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    gate.release(drop=True)
    assert proc.returncode == -signal.SIGKILL


def test_publish_load_republish_and_new_version(hub: LocalHub, tmp_path: Path) -> None:
    repo = "kerneltraj/demo"
    v1 = write_release(tmp_path / "v1", {"graded_attempts": rows("g", 4, -2.0), "trajectories": rows("t", 3, 0.5)})
    pub = publisher(hub, repo)

    first = pub.publish(v1, "v1.0.0")
    assert first.created_commit and first.tag == "v1.0.0"
    assert tags(hub, repo) == {"v1.0.0": first.commit_sha}
    assert repo_files(hub, repo, "v1.0.0") == {f.path for f in scan_release(v1)} | {".gitattributes"}
    assert n_commits(hub, repo) == 2  # the Hub's initial commit + the release

    # the same release again: nothing new on the Hub, and no commit request was even sent
    seen = len(hub.requests)
    again = pub.publish(v1, "v1.0.0")
    assert (again.commit_sha, again.created_commit) == (first.commit_sha, False)
    assert n_commits(hub, repo) == 2
    assert not [r for r in hub.requests[seen:] if r.route in (COMMIT_ROUTE, TAG_ROUTE)]

    # a new version: changed rows, and trajectories re-sharded (the old shard must disappear from main)
    v2 = write_release(tmp_path / "v2", {"graded_attempts": rows("g2", 5, 1.0), "trajectories": rows("t2", 4, 2.0)},
                       shards={"trajectories": 2})
    second = pub.publish(v2, "v1.1.0")
    assert second.created_commit and second.commit_sha != first.commit_sha
    assert tags(hub, repo) == {"v1.0.0": first.commit_sha, "v1.1.0": second.commit_sha}
    assert repo_files(hub, repo, "main") == {f.path for f in scan_release(v2)} | {".gitattributes"}
    assert "data/trajectories/train-00000-of-00001.parquet" not in repo_files(hub, repo, "main")
    assert n_commits(hub, repo) == 3

    # a published version is pinned: other content under v1.0.0 is refused and the tag does not move
    with pytest.raises(VersionPinnedError, match="pinned forever"):
        pub.publish(v2, "v1.0.0")
    assert tags(hub, repo)["v1.0.0"] == first.commit_sha

    # the real datasets library and snapshot_download, in a fresh process pointed at the local Hub
    seen = len(hub.requests)
    out = load_in_subprocess(hub, tmp_path, repo, [("graded_attempts", "v1.0.0"), ("trajectories", "v1.0.0"),
                                                   ("graded_attempts", "v1.1.0"), ("trajectories", "v1.1.0")])
    assert out["graded_attempts@v1.0.0"] == pq.read_table(v1 / "data/graded_attempts").to_pylist()
    assert out["trajectories@v1.0.0"] == pq.read_table(v1 / "data/trajectories").to_pylist()
    assert out["graded_attempts@v1.1.0"] == pq.read_table(v2 / "data/graded_attempts").to_pylist()
    assert sorted(out["trajectories@v1.1.0"], key=str) == sorted(
        pq.read_table(v2 / "data/trajectories").to_pylist(), key=str)
    snapshot = out["snapshot@v1.0.0"]
    assert set(snapshot) == {f.path for f in scan_release(v1)} | {".gitattributes"}
    assert all(snapshot[f.path] == f.sha256 for f in scan_release(v1))

    # every request the real clients made hit an implemented endpoint; HEAD + GET of resolve were used
    client_requests = hub.requests[seen:]
    assert client_requests and not [r for r in client_requests if r.route == UNROUTED]
    routes = {f"{r.method} {r.route}" for r in client_requests}
    assert {"HEAD /datasets/{repo}/resolve/{rev}/{path}", "GET /datasets/{repo}/resolve/{rev}/{path}",
            "GET /api/datasets/{repo}/tree/{rev}/{path}"} <= routes


def load_in_subprocess(hub: LocalHub, tmp_path: Path, repo: str, wanted: list[tuple[str, str]]) -> dict[str, Any]:
    code = textwrap.dedent(f"""
        import hashlib, json, os, sys
        import datasets
        from huggingface_hub import snapshot_download
        out = {{}}
        for config, revision in {wanted!r}:
            ds = datasets.load_dataset({repo!r}, config, revision=revision, split="train")
            out[f"{{config}}@{{revision}}"] = ds.to_list()
        path = snapshot_download({repo!r}, repo_type="dataset", revision="v1.0.0")
        out["snapshot@v1.0.0"] = {{
            os.path.relpath(os.path.join(d, f), path): hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
            for d, _, fs in os.walk(path) for f in fs}}
        print("RESULT" + json.dumps(out))
    """)
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0", "HF_DATASETS_OFFLINE": "0",
           "HF_HOME": str(tmp_path / "hf_home"), "HF_TOKEN": TOKEN, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT"):])


def test_killed_after_commit_before_tag_resumes_without_new_commit(hub: LocalHub, tmp_path: Path) -> None:
    repo = "kerneltraj/crash-before-tag"
    pub = publisher(hub, repo)
    v1 = pub.publish(write_release(tmp_path / "v1", {"graded_attempts": rows("a", 3, 0.0)}), "v1.0.0")
    v2_dir = write_release(tmp_path / "v2", {"graded_attempts": rows("b", 3, 1.0)})

    gate = hub.gate("POST", TAG_ROUTE)
    kill_at_gate(run_publish_subprocess(hub, repo, v2_dir, "v1.1.0"), gate)

    orphan = main_head(hub, repo)  # the killed publish committed, then died before tagging
    assert orphan != v1.commit_sha
    assert tags(hub, repo) == {"v1.0.0": v1.commit_sha}
    commits = n_commits(hub, repo)

    resumed = pub.publish(v2_dir, "v1.1.0")
    assert (resumed.commit_sha, resumed.created_commit) == (orphan, False)  # found by content, then tagged
    assert tags(hub, repo) == {"v1.0.0": v1.commit_sha, "v1.1.0": orphan}
    assert n_commits(hub, repo) == commits


def test_killed_mid_upload_leaves_previous_tag_and_resumes(lfs_hub: LocalHub, tmp_path: Path) -> None:
    repo = "kerneltraj/crash-mid-upload"
    pub = publisher(lfs_hub, repo)
    big = {"attempt_id": [f"x-{i:04d}" for i in range(400)], "reward": [float(i) for i in range(400)]}
    v1_dir = write_release(tmp_path / "v1", {"graded_attempts": big, "trajectories": rows("t", 3, 0.0)})
    v1 = pub.publish(v1_dir, "v1.0.0")
    entries = {e.path: e for e in api(lfs_hub).list_repo_tree(repo, repo_type="dataset", recursive=True)
               if hasattr(e, "blob_id")}
    local = {f.path: f for f in scan_release(v1_dir)}
    big_shard = "data/graded_attempts/train-00000-of-00001.parquet"
    assert entries[big_shard].lfs is not None and entries[big_shard].lfs.sha256 == local[big_shard].sha256
    assert entries["README.md"].lfs is None  # small files stay regular git blobs: both comparisons are used
    assert pub.publish(v1_dir, "v1.0.0").created_commit is False

    v2_dir = write_release(tmp_path / "v2", {"graded_attempts": {**big, "reward": [-1.0] * 400},
                                             "trajectories": rows("t", 3, 0.0)})
    gate = lfs_hub.gate("PUT", "/lfs-upload/{repo}/{oid}")
    kill_at_gate(run_publish_subprocess(lfs_hub, repo, v2_dir, "v1.1.0", HF_HUB_DISABLE_XET="1"), gate)
    assert main_head(lfs_hub, repo) == v1.commit_sha and tags(lfs_hub, repo) == {"v1.0.0": v1.commit_sha}

    v2 = pub.publish(v2_dir, "v1.1.0")
    assert v2.created_commit and tags(lfs_hub, repo) == {"v1.0.0": v1.commit_sha, "v1.1.0": v2.commit_sha}
    for version, release in (("v1.0.0", v1_dir), ("v1.1.0", v2_dir)):
        path = api(lfs_hub).hf_hub_download(repo, big_shard, repo_type="dataset", revision=version,
                                            cache_dir=tmp_path / "cache")
        assert Path(path).read_bytes() == (release / big_shard).read_bytes()


def test_retries_transient_errors_then_succeeds(hub: LocalHub, tmp_path: Path) -> None:
    repo = "kerneltraj/flaky"
    pub = publisher(hub, repo, max_retries=3)
    hub.fail_next("POST", COMMIT_ROUTE, [503, 502])
    hub.fail_next("POST", TAG_ROUTE, [500])
    result = pub.publish(write_release(tmp_path / "v1", {"graded_attempts": rows("a", 2, 0.0)}), "v1.0.0")
    statuses = [r.status for r in hub.requests if r.route == COMMIT_ROUTE]
    assert statuses == [503, 502, 200]
    assert [r.status for r in hub.requests if r.route == TAG_ROUTE] == [500, 200]
    assert result.created_commit and n_commits(hub, repo) == 2


def test_lost_answers_do_not_duplicate_the_commit(hub: LocalHub, tmp_path: Path) -> None:
    repo = "kerneltraj/lossy"
    pub = publisher(hub, repo)
    v1 = pub.publish(write_release(tmp_path / "v1", {"graded_attempts": rows("a", 2, 0.0)}), "v1.0.0")
    # both requests are applied by the Hub, but the publisher never hears back and must retry safely
    hub.fail_next("POST", COMMIT_ROUTE, [LOST_ANSWER])
    hub.fail_next("POST", TAG_ROUTE, [LOST_ANSWER])
    v2 = pub.publish(write_release(tmp_path / "v2", {"graded_attempts": rows("b", 2, 0.0)}), "v1.1.0")
    assert [r.status for r in hub.requests if r.route == COMMIT_ROUTE][-1] == LOST_ANSWER
    assert [r.status for r in hub.requests if r.route == TAG_ROUTE][-2:] == [LOST_ANSWER, 409]
    assert v2.created_commit and v2.commit_sha == main_head(hub, repo)
    assert n_commits(hub, repo) == 3  # initial + v1.0.0 + v1.1.0, no duplicate
    assert tags(hub, repo) == {"v1.0.0": v1.commit_sha, "v1.1.0": v2.commit_sha}


def test_gives_up_with_advice_and_untouched_tags(hub: LocalHub, tmp_path: Path) -> None:
    repo = "kerneltraj/down"
    pub = publisher(hub, repo, max_retries=1)
    v1 = pub.publish(write_release(tmp_path / "v1", {"graded_attempts": rows("a", 2, 0.0)}), "v1.0.0")
    hub.fail_next("POST", COMMIT_ROUTE, [503, 503])
    with pytest.raises(HubPublishError, match=r"step 'commit' failed after 2 attempt.*re-run the same publish"):
        pub.publish(write_release(tmp_path / "v2", {"graded_attempts": rows("b", 2, 0.0)}), "v1.1.0")
    assert tags(hub, repo) == {"v1.0.0": v1.commit_sha} and main_head(hub, repo) == v1.commit_sha


def test_missing_token_names_the_variable(hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_VAR)
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # must not be picked up: only token_env_var counts
    with pytest.raises(HubPublishError, match=TOKEN_VAR):
        publisher(hub, "kerneltraj/no-token").publish(
            write_release(tmp_path / "v1", {"graded_attempts": rows("a", 2, 0.0)}), "v1.0.0")


def test_dry_run_writes_manifest_without_network(tmp_path: Path) -> None:
    release = write_release(tmp_path / "rel", {"graded_attempts": rows("a", 2, 0.0), "trajectories": rows("t", 1, 0.0)})
    unreachable = HubPublisher(endpoint="http://127.0.0.1:9", repo_id="kerneltraj/dry")
    manifest = json.loads(unreachable.dry_run(release, "v1.0.0", tmp_path / "out").read_text())
    assert manifest["tag"] == "v1.0.0" and manifest["repo_id"] == "kerneltraj/dry"
    expected = {f.path: f for f in scan_release(release)}
    assert {op["path"] for op in manifest["operations"]} == set(expected)
    for op in manifest["operations"]:
        assert (op["sha256"], op["size_bytes"]) == (expected[op["path"]].sha256, expected[op["path"]].size_bytes)
        assert (tmp_path / "out" / "files" / op["path"]).read_bytes() == (release / op["path"]).read_bytes()


def test_release_checks_happen_before_any_request(tmp_path: Path) -> None:
    pub = HubPublisher(endpoint="http://127.0.0.1:9", repo_id="kerneltraj/x")
    release = write_release(tmp_path / "rel", {"graded_attempts": rows("a", 1, 0.0)})
    with pytest.raises(HubPublishError, match="semantic version"):
        pub.publish(release, "latest")
    (release / "data" / "graded_attempts" / "train-00000-of-00001.parquet").unlink()
    with pytest.raises(HubPublishError, match="matches no file"):
        pub.publish(release, "v1.0.0")
    (release / "README.md").unlink()
    with pytest.raises(HubPublishError, match="README.md"):
        pub.publish(release, "v1.0.0")


def test_server_is_strict(hub: LocalHub) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    api(hub).create_repo("kerneltraj/strict", repo_type="dataset")
    base = f"{hub.url}/api/datasets/kerneltraj/strict"
    with httpx2.Client(timeout=10) as c:
        r = c.get(f"{hub.url}/api/datasets/kerneltraj/nope/revision/main")
        assert (r.status_code, r.headers["X-Error-Code"]) == (404, "RepoNotFound")
        r = c.get(f"{base}/revision/v9.9.9")
        assert (r.status_code, r.headers["X-Error-Code"]) == (404, "RevisionNotFound")
        r = c.head(f"{hub.url}/datasets/kerneltraj/strict/resolve/main/missing.parquet")
        assert (r.status_code, r.headers["X-Error-Code"], r.content) == (404, "EntryNotFound", b"")
        ndjson = {"Content-Type": "application/x-ndjson", **auth}
        assert c.post(f"{base}/commit/main", content=b"{not json", headers=ndjson).status_code == 400
        header = json.dumps({"key": "header", "value": {"summary": "x"}})
        for op in ({"key": "file", "value": {"path": "../escape", "content": "", "encoding": "base64"}},
                   {"key": "lfsFile", "value": {"path": "a.bin", "algo": "sha256", "oid": "0" * 64, "size": 1}},
                   {"key": "teleport", "value": {"path": "a"}}):
            r = c.post(f"{base}/commit/main", content=f"{header}\n{json.dumps(op)}\n", headers=ndjson)
            assert r.status_code == 400, (op, r.text)
        r = c.post(f"{base}/commit/main", content=f"{header}\n" + json.dumps(
            {"key": "deletedFile", "value": {"path": "nope.txt"}}), headers=ndjson)
        assert (r.status_code, r.headers["X-Error-Code"]) == (404, "EntryNotFound")
        r = c.post(f"{base}/commit/main", content=f"{header}\n", headers={**ndjson, "Authorization": "Bearer wrong"})
        assert r.status_code == 401
        assert c.post(f"{base}/tag/main", json={"tag": "v1"}).status_code == 401  # writes need the token
        assert c.post(f"{base}/tag/main", json={"tag": "bad..name"}, headers=auth).status_code == 400
        assert c.post(f"{base}/tag/main", json={"tag": "v1"}, headers=auth).status_code == 200
        assert c.post(f"{base}/tag/main", json={"tag": "v1"}, headers=auth).status_code == 409
        r = c.get(f"{hub.url}/datasets/kerneltraj/strict/resolve/v1/.gitattributes", headers={"Range": "bytes=0-3"})
        assert (r.status_code, len(r.content), r.headers["Content-Range"].startswith("bytes 0-3/")) == (206, 4, True)
        assert not any(k.lower().startswith("x-xet") for k in r.headers)
        assert c.get(f"{base}/tree/main?cursor=%%%").status_code == 400
        assert c.get(f"{hub.url}/api/models/kerneltraj/strict").status_code == 404
    assert hub.requests[-1].route == UNROUTED
    api(hub).delete_tag("kerneltraj/strict", tag="v1", repo_type="dataset")
    assert tags(hub, "kerneltraj/strict") == {}
    with pytest.raises(RevisionNotFoundError):
        api(hub).delete_tag("kerneltraj/strict", tag="v1", repo_type="dataset")
    api(hub).create_repo("kerneltraj/secret", repo_type="dataset", private=True)
    assert httpx2.get(f"{hub.url}/api/datasets/kerneltraj/secret").headers["X-Error-Code"] == "RepoNotFound"
    assert api(hub).dataset_info("kerneltraj/secret").private is True


def test_cli_serves_until_terminated(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tests.hub_server", "--port", "0", "--root",
                             str(tmp_path / "root")], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = line.strip().rsplit(" ", 1)[-1]
        assert url.startswith("http://127.0.0.1:"), line
        from huggingface_hub import HfApi

        HfApi(endpoint=url, token=False).create_repo("kerneltraj/cli", repo_type="dataset")
        assert (tmp_path / "root" / "datasets" / "kerneltraj" / "cli.git" / "HEAD").is_file()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_a_hung_hub_ends_the_publish_at_its_timeout(hub: LocalHub, tmp_path: Path) -> None:
    """A request the Hub never answers ends at the publisher's timeout with an error naming the step, not a
    hang; requests sent outside a publish are left as they were."""
    import time

    import huggingface_hub

    gate = hub.gate("POST", "/api/repos/create")
    pub = publisher(hub, "kerneltraj/hung", max_retries=0)
    pub = pub.model_copy(update={"timeout_s": 1.0})
    t0 = time.monotonic()
    try:
        with pytest.raises(HubPublishError, match=r"step 'create repo' failed after 1 attempt.*Timeout"):
            pub.publish(write_release(tmp_path / "v1", {"graded_attempts": rows("a", 2, 0.0)}), "v1.0.0")
    finally:
        gate.release(drop=True)
    assert time.monotonic() - t0 < 30
    plain = huggingface_hub.get_session().build_request("GET", hub.url)
    before = dict(plain.extensions)
    for hook in huggingface_hub.get_session().event_hooks["request"]:
        hook(plain)
    assert plain.extensions.get("timeout") == before.get("timeout")


def test_concurrent_publishes_keep_their_own_timeouts() -> None:
    """The timeout belongs to the publish that sends the request (its context), so two publishes on two
    threads do not trade timeouts, and the shared client's hook is added once."""
    import threading

    import huggingface_hub

    from pipelines.publishing.hub import _client_timeout

    seen: dict[str, float] = {}
    both_in = threading.Barrier(2)

    def publish(name: str, timeout_s: float) -> None:
        with _client_timeout(timeout_s):
            both_in.wait(timeout=10)
            request = huggingface_hub.get_session().build_request("GET", "http://127.0.0.1:9/")
            for hook in huggingface_hub.get_session().event_hooks["request"]:
                hook(request)
            seen[name] = request.extensions["timeout"]["read"]
            both_in.wait(timeout=10)

    threads = [threading.Thread(target=publish, args=(n, t)) for n, t in (("a", 3.0), ("b", 7.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == {"a": 3.0, "b": 7.0}
    hooks = huggingface_hub.get_session().event_hooks["request"]
    assert sum(getattr(h, "__name__", "") == "_timeout_hook" for h in hooks) == 1
