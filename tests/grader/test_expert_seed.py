"""The experts' compiled Triton kernels built ahead for each built-in task and planted in its kept worker's own cache
(grader.expertseed, `GraderService(seed_experts=True)`, `Slot.task(kernels=...)`).

On the CPU Triton compiles nothing (its interpreter runs the kernels), so the builders here are given experts of our
own that write into their Triton cache what Triton writes there: a kernel's files and its group, which names them by
absolute path. The processes, the channel and the plant are the real ones; the cache hit itself is checked on a GPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grader import expertseed, tritonseed
from grader.contract import GradeRequest, Status
from tests.grader.sources import HONEST_SOFTMAX

# What a compile leaves in Triton's cache: the kernel's files under its key, its group naming them by absolute path,
# and a launcher; Triton's host module too, which every worker has already (grader.tritonseed).
WRITES_A_KERNEL = """\
import json, os
_c = os.environ["TRITON_CACHE_DIR"]
def _put(key, name, data):
    os.makedirs(os.path.join(_c, key), exist_ok=True)
    with open(os.path.join(_c, key, name), "wb") as f:
        f.write(data)
_put("KEY", "k.cubin", b"cubin")
_put("KEY", "k.json", b"{}")
_put("KEY", "__grp__k.json", json.dumps({"child_paths": {n: os.path.join(_c, "KEY", n) for n in ("k.cubin", "k.json")}}
                                        ).encode())
_put("UTILS", "cuda_utils.cpython-x.so", b"driver")
_sizes = []
def run(x):
    _sizes.append(tuple(x.shape))
    _put("LAUNCH%d" % len(_sizes), "__triton_launcher.so", repr(_sizes[-1]).encode())
    return x
"""

# Loads only where its worker's own cache holds the kernel's group whole, in this cache: what Triton's
# `FileCacheManager.get_group` needs to find a kernel instead of compiling it.
FINDS_ITS_KERNEL = """\
import json, os
_c = os.environ["TRITON_CACHE_DIR"]
with open(os.path.join(_c, "KEY", "__grp__k.json")) as f:
    _children = json.load(f)["child_paths"]
assert sorted(_children) == ["k.cubin", "k.json"], _children
for _p in _children.values():
    assert _p.startswith(_c + "/") and os.path.isfile(_p), _p
def run(x):
    return x
"""

SPECS = [{"shape": [4, 8], "dtype": "float32", "dist": "normal", "mean": [0.0, 0.0], "std": [1, 1], "low": 0.0,
          "high": 1.0}]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One builder over three tasks: a kernel at two sizes, another task's kernel, and an expert that fails."""
    from grader.launcher import base_env

    other = WRITES_A_KERNEL.replace('"KEY"', '"OTHER"').replace("LAUNCH%d", "OTHERLAUNCH%d")
    builds = expertseed.Builds(base_env("cpu"), "cpu", builders=1)
    jobs = [{"task": "a@1", "source": WRITES_A_KERNEL, "sizes": [SPECS, [dict(SPECS[0], shape=[2, 16])]]},
            {"task": "b@1", "source": other, "sizes": [SPECS]},
            {"task": "bad@1", "source": "raise RuntimeError('no such kernel')\n", "sizes": [SPECS]}]
    try:
        assert builds.start(jobs) == 3
        assert builds.start(jobs) == 0  # asked once
        for thread in builds._threads:
            thread.join(120)
        yield builds
    finally:
        builds.close()


def test_a_builder_sends_each_task_the_files_its_expert_made_and_says_why_one_has_none(built):
    a, b = built.kernels("a@1"), built.kernels("b@1")
    assert set(a) == {"KEY/k.cubin", "KEY/k.json", "KEY/__grp__k.json", "LAUNCH1/__triton_launcher.so",
                      "LAUNCH2/__triton_launcher.so"}, sorted(a)
    assert a["LAUNCH2/__triton_launcher.so"] == b"(2, 16)"  # called at each size, in order
    # the next task gets only what its own expert added, and no one gets Triton's host module again
    assert set(b) == {"OTHER/k.cubin", "OTHER/k.json", "OTHER/__grp__k.json", "OTHERLAUNCH1/__triton_launcher.so"}
    assert built.kernels("bad@1") == {} and "no such kernel" in built.records["bad@1"]["error"]
    summary = built.summary()
    assert (summary["asked"], summary["built"], summary["with_kernels"], summary["failed"]) == (3, 3, 2, 1), summary


def test_a_planted_group_names_its_files_in_the_cache_it_was_planted_in(built, tmp_path):
    files = built.kernels("a@1")
    builder_paths = json.loads(files["KEY/__grp__k.json"])["child_paths"]
    assert not any(p.startswith(str(tmp_path)) for p in builder_paths.values())
    climbing = json.dumps({"child_paths": {"k.cubin": "/elsewhere/k.cubin", "x": "../../etc/passwd"}}).encode()
    assert expertseed.plant({**files, "ESC/__grp__x.json": climbing, "../up.cubin": b"x"}, str(tmp_path)) == 6
    children = json.loads((tmp_path / "KEY" / "__grp__k.json").read_text())["child_paths"]
    assert children == {n: str(tmp_path / "KEY" / n) for n in ("k.cubin", "k.json")}
    assert all(os.path.isfile(p) for p in children.values())
    # a child is named again by its file name, inside its group's own key: nothing climbs out
    assert json.loads((tmp_path / "ESC" / "__grp__x.json").read_text())["child_paths"] == {
        "k.cubin": str(tmp_path / "ESC" / "k.cubin"), "x": str(tmp_path / "ESC" / "passwd")}
    assert not (tmp_path.parent / "up.cubin").exists()


@pytest.fixture(scope="module")
def service():
    from grader.service import GraderService

    with GraderService(workers=1, seed_experts=True) as svc:
        yield svc


def test_a_task_worker_starts_with_the_kernels_it_is_given_and_no_candidate_takes_them(service, built):
    files = built.kernels("a@1")
    slot = service.slots[0]
    conn = slot.task("planted@1", FINDS_ITS_KERNEL, HONEST_SOFTMAX, None, 60.0, kernels=files)
    assert conn.planted == len(files)
    with pytest.raises(RuntimeError, match="failed to load"):  # the same expert, without them, finds nothing
        slot.task("unplanted@1", FINDS_ITS_KERNEL, HONEST_SOFTMAX, None, 60.0)
    candidate = slot.spawn(60.0)
    try:
        reply, _, _ = candidate.request({"op": "plant"}, 30.0, payload=tritonseed.encode(files))
        assert not reply["ok"] and "given no kernels" in reply["error"], reply
    finally:
        slot.finish(candidate)
    purposes = service.gpu_lock.stats()["purposes"]
    assert purposes["worker start, task: the expert's kernels planted (grader.expertseed)"][0] == 1


def test_a_grading_builds_the_experts_of_its_built_in_tasks_only(service):
    req = GradeRequest(attempt_id="seeded_softmax", task_id="softmax_rows_fp32", source=HONEST_SOFTMAX,
                       language="pytorch")
    [r] = list(service.grade([req]))
    assert r.status is Status.CORRECT, r.reason
    builds = service.expert_builds
    for thread in builds._threads:
        thread.join(120)
    key = service.task("softmax_rows_fp32").expert_key
    # built without error; on the CPU Triton's interpreter leaves nothing to plant
    assert set(builds.records) == {key} and "error" not in builds.records[key], builds.records
    # an imported card's expert is not ours: never built, though it is the built-in card's code under another id
    import dataclasses

    from grader.session import SealedTask

    gelu = service.task("gelu_fp32")
    imported = SealedTask(dataclasses.replace(gelu.card, task_id="imported_gelu"), service.device)
    assert [j["task"] for j in expertseed.jobs_for([gelu, imported], service.device)] == [gelu.expert_key]


@pytest.mark.gpu
def test_on_a_gpu_a_worker_given_the_built_kernels_compiles_none(tmp_path):
    """The real expert of a built-in card, built ahead; a fresh process that imports it as a worker does, with the
    files planted in its own cache, calls it at every size and leaves its cache with no kernel group of its own."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.catalogue import load_catalogue
    from grader.launcher import base_env
    from grader.session import SealedTask

    [job] = expertseed.jobs_for([SealedTask(load_catalogue()["softmax_rows_fp32"], "cuda")], "cuda")
    builds = expertseed.Builds(base_env("cuda"), "cuda", builders=1)
    try:
        builds.start([job])
        for thread in builds._threads:
            thread.join(300)
    finally:
        builds.close()
    files = builds.kernels(job["task"])
    assert files and any(rel.endswith(".cubin") for rel in files), builds.records
    # the stand-in worker below is the builder again, whose first job's cache is `job0` under the one it is given
    cache = tmp_path / "cache"
    own = cache / "job0"
    assert expertseed.plant(files, str(own)) == len(files)
    inodes = {rel: (own / rel).stat().st_ino for rel in files}
    work = tmp_path / "work"
    work.mkdir()
    env = dict(base_env("cuda"), TRITON_CACHE_DIR=str(cache), HOME=str(work), TMPDIR=str(work))
    done = subprocess.run([sys.executable, "-m", "grader.expertseed", str(cache)], env=env, cwd=work,
                          input=json.dumps({"device": "cuda", "jobs": [job]}).encode(), capture_output=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    line = json.loads(done.stdout.splitlines()[-1])
    assert "error" not in line, line
    after = expertseed.decode(line["files"].encode())
    # nothing compiled: no file the planted ones did not hold, and none of them written again (Triton writes a file
    # it compiled to a temporary name and renames it over the old one: a new inode)
    assert set(after) == set(files), sorted(set(after) ^ set(files))
    assert {rel: (own / rel).stat().st_ino for rel in files} == inodes
