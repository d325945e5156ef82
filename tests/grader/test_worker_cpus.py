"""Which cores a slot's workers run on (`launcher.worker_cpus`, `GraderService(twin_apart=...)`): a candidate on its
slot's own core; a spare, or a kept worker started aside, on the cores no slot is given; a kept worker (the expert
twin) beside its candidate, or with `twin_apart` on the cores no slot is given. The host here has too few cores to
pin anything (`slot_cpus` needs a core a slot and two more), so the unit tests give the process a 16-core host's
affinity; the last test is the real service on a GPU host."""
from __future__ import annotations

import json
import os

import pytest

from grader import launcher

SIXTEEN = set(range(16))


@pytest.fixture
def sixteen_cores(monkeypatch):
    monkeypatch.setattr(launcher.os, "sched_getaffinity", lambda pid: set(SIXTEEN))


def test_a_twin_apart_runs_on_the_cores_no_slot_is_given(sixteen_cores):
    rest = list(range(10))  # 16 cores, 6 slots: the slots take 15..10
    assert launcher.worker_cpus(0, 6, "candidate") == [15]
    assert launcher.worker_cpus(5, 6, "candidate", twin_apart=True) == [10]  # a candidate never moves
    for role in ("task", "expert", "reference"):
        assert launcher.worker_cpus(2, 6, role) == [13]  # beside its candidate, as before
        assert launcher.worker_cpus(2, 6, role, twin_apart=True) == rest
        assert launcher.worker_cpus(2, 6, role, aside=True) == rest
    assert launcher.worker_cpus(0, 6, "candidate", spare=True) == rest


def test_too_few_cores_pin_nothing(monkeypatch):
    monkeypatch.setattr(launcher.os, "sched_getaffinity", lambda pid: set(range(7)))
    for kw in ({}, {"twin_apart": True}, {"spare": True}, {"aside": True}):
        assert launcher.worker_cpus(0, 6, "task", **kw) is None
        assert launcher.worker_cpus(0, 6, "candidate", **kw) is None


@pytest.mark.parametrize("twin_apart", [False, True])
def test_a_slot_spawns_each_role_on_the_cores_worker_cpus_gives(sixteen_cores, monkeypatch, twin_apart):
    """The slot's own spawn (`Slot._spawn`, fresh mode: the worker's config travels in its environment) asks for the
    cores `worker_cpus` gives; the worker is stopped before it boots (no device here)."""
    asked = []

    def popen(args, pass_fds, env, cwd):
        asked.append(json.loads(env["KERNELTRAJ_WORKER_CONFIG"])["cpus"])
        raise OSError("stopped before boot: this test reads what the worker was asked to run on")

    monkeypatch.setattr(launcher.subprocess, "Popen", popen)
    slot = launcher.Slot(1, "fresh", "cuda:0", [], slots=6, twin_apart=twin_apart, spares=False)
    try:
        assert slot.config["cpus"] == [14]
        for role, kw in (("candidate", {}), ("task", {}), ("expert", {}), ("candidate", {"spare": True}),
                         ("task", {"aside": True})):
            with pytest.raises(OSError, match="stopped before boot"):
                slot._spawn(1.0, None, role=role, uid=None, **kw)
    finally:
        slot.close()
    rest = list(range(10))
    kept = rest if twin_apart else [14]
    assert asked == [[14], kept, kept, rest, rest]


@pytest.mark.gpu
def test_on_a_gpu_host_the_twin_apart_runs_off_its_candidates_core():
    """The real service: after a grade the slot's kept task worker (the twin) runs on the cores no slot is given with
    `twin_apart`, on the slot's own core without; the grade is correct either way."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if len(os.sched_getaffinity(0)) < 3:
        pytest.skip("too few cores to pin a slot (`slot_cpus`)")
    from grader.catalogue import load_catalogue
    from grader.contract import GradeRequest, Status
    from grader.service import GraderService

    source = load_catalogue()["gelu_fp32"].expert  # the expert's source, graded against itself
    for apart in (False, True):
        with GraderService(workers=1, twin_apart=apart) as svc:
            [result] = list(svc.grade([GradeRequest(attempt_id=f"apart-{apart}", task_id="gelu_fp32",
                                                    source=source, language="triton")]))
            assert result.status == Status.CORRECT, result.reason
            slot = svc.slots[0]
            kept = list(slot._kept.values())
            assert kept, "the grade kept no task worker"
            want = launcher.spare_cpus(1) if apart else slot.config["cpus"]
            for conn in kept:
                assert sorted(os.sched_getaffinity(conn.pid)) == sorted(want), (apart, conn.role)
