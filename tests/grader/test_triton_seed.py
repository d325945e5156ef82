"""Triton's host module built once and planted in every worker's own Triton cache (grader.tritonseed,
`GraderService(seed_triton=True)`, `Slot.seed_triton`).

On the CPU there is no Triton driver to build, so the slot is given a seed of our own here, and a candidate reads
its worker's cache: the same zygote, fork and plant as on a GPU. The build itself runs on a GPU only.
"""
from __future__ import annotations

import os

import pytest

from grader import tritonseed
from grader.contract import GradeRequest, Status
from grader.service import GraderService
from tests.grader.sources import HONEST_SOFTMAX

TASK = "softmax_rows_fp32"
SEED = {"0123abcd/cuda_utils.cpython-x.so": b"the service's build"}
# Correct only where its worker's own Triton cache (`TRITON_CACHE_DIR`, `.triton` in its scratch, its working folder)
# holds the seed; it then spoils its copy, which no later worker may see.
READS_THE_SEED = """\
path = ".triton/0123abcd/cuda_utils.cpython-x.so"
try:
    with open(path, "rb") as f:
        seeded = f.read() == b"the service's build"
    with open(path, "wb") as f:
        f.write(b"spoilt")
except OSError:
    seeded = False
""" + HONEST_SOFTMAX.replace("    return e / e.sum(-1, keepdim=True)\n",
                            "    return e / e.sum(-1, keepdim=True) if seeded else e\n")


def test_every_worker_forked_after_the_seed_finds_its_own_copy_and_a_zygote_started_again_is_given_it_again():
    def grade(*names):
        return list(svc.grade([GradeRequest(attempt_id=n, task_id=TASK, source=READS_THE_SEED, language="pytorch")
                               for n in names]))

    with GraderService(mode="zygote", workers=1) as svc:
        [before] = grade("unseeded")
        slot = svc.slots[0]
        assert slot.seed_triton(SEED)
        after = grade("seeded0", "seeded1")
        slot.zygote.kill()  # the next spawn starts a zygote again, which is given the seed again
        slot.zygote.wait()
        [restarted] = grade("restarted")
        planted = {k: n for k, (n, _) in svc.gpu_lock.stats()["purposes"].items() if "Triton's module planted" in k}
    assert before.status is Status.WRONG_OUTPUT, before.reason
    # Each grade found the seed as the service built it, though the grade before it spoilt its own copy.
    assert [r.status for r in after] == [Status.CORRECT, Status.CORRECT], [r.reason for r in after]
    assert restarted.status is Status.CORRECT, restarted.reason
    # Each worker's hello said it planted the seed: the three candidates' and their task's (none before the seed).
    assert planted and sum(planted.values()) >= 3, planted


def test_a_seed_keeps_only_plain_names_and_plants_beside_what_is_there(tmp_path):
    cache = tmp_path / "built"
    (cache / "k1").mkdir(parents=True)
    (cache / "k1" / "cuda_utils.so").write_bytes(b"module")
    (cache / "k2").mkdir()
    (cache / "k2" / "kernel.cubin").write_bytes(b"a kernel's")
    (cache / "deep" / "er").mkdir(parents=True)
    (cache / "deep" / "er" / "x.so").write_bytes(b"too deep")
    (cache / "k1" / "link.so").symlink_to(cache / "k1" / "cuda_utils.so")
    files = tritonseed.collect(cache)
    assert files == {"k1/cuda_utils.so": b"module"}
    assert tritonseed.decode(tritonseed.encode({**files, "../escape.so": b"x", "/abs/x.so": b"y"})) == files

    worker_cache = tmp_path / "worker"
    (worker_cache / "k1").mkdir(parents=True)
    (worker_cache / "k1" / "cuda_utils.so").write_bytes(b"its own")
    assert tritonseed.plant({**files, "k3/other.so": b"other"}, str(worker_cache)) == 1
    assert (worker_cache / "k1" / "cuda_utils.so").read_bytes() == b"its own"
    assert (worker_cache / "k3" / "other.so").read_bytes() == b"other"
    assert not (tmp_path / "escape.so").exists()


@pytest.mark.gpu
def test_the_build_on_a_gpu_keeps_tritons_cuda_utils():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.launcher import base_env

    files, record = tritonseed.build(base_env("cuda"))
    assert files, record
    assert any(os.path.basename(rel).startswith("cuda_utils") for rel in files), record


# Correct only where Triton's key of itself was computed before its worker was forked (`triton_key_once`).
FINDS_THE_KEY = """\
from triton.runtime.cache import triton_key
keyed = triton_key.cache_info().currsize == 1
""" + HONEST_SOFTMAX.replace("    return e / e.sum(-1, keepdim=True)\n",
                            "    return e / e.sum(-1, keepdim=True) if keyed else e\n")


def test_a_worker_forked_after_its_zygote_computed_tritons_key_finds_it_and_one_forked_without_does_not():
    def grade(name):
        return list(svc.grade([GradeRequest(attempt_id=name, task_id=TASK, source=FINDS_THE_KEY,
                                            language="pytorch")]))[0]

    with GraderService(mode="zygote", workers=1, triton_key_once=True) as svc:
        keyed = grade("keyed")
        slot = svc.slots[0]
        took = slot.triton_key_ms
        slot.triton_key_once = False  # the next spawn starts a zygote again, without it
        slot.zygote.kill()
        slot.zygote.wait()
        unkeyed = grade("unkeyed")
    assert took is not None and took > 0
    assert keyed.status is Status.CORRECT, keyed.reason
    assert unkeyed.status is Status.WRONG_OUTPUT, unkeyed.reason
