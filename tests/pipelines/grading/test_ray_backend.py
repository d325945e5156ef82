"""The Ray grading backend on a real local Ray cluster (CPU, 2 actors), including actors killed mid-batch."""
from __future__ import annotations

import threading
import time

import pytest

ray = pytest.importorskip("ray")

from grader.contract import REWARD_FLOOR, GradeRequest, Reason, Status  # noqa: E402
from grader.service import GraderService  # noqa: E402
from pipelines.grading.ray_backend import GradedItem, RayGradingBackend  # noqa: E402

pytestmark = pytest.mark.ray

TASK = "softmax_rows_fp32"
HONEST = ("import torch\ndef run(x):\n    e = (x - x.max(-1, keepdim=True).values).exp()\n"
          "    return e / e.sum(-1, keepdim=True)\n")
# Sleeps while the worker loads it, so the attempt is reliably in flight when its actor is killed.
SLEEPER = "import time\ntime.sleep(5)\n" + HONEST
CASES = {
    # name: (source, language, expected status, expected reason)
    "honest": (HONEST, "pytorch", Status.CORRECT, Reason.OK),
    "wrong": ("import torch\ndef run(x):\n    return x.exp()\n", "pytorch", Status.WRONG_OUTPUT, Reason.MISMATCH),
    "syntax": ("def run(x) return x\n", "pytorch", Status.COMPILE_ERROR, Reason.COMPILE),
    "raises": ("def run(x):\n    raise ValueError('nope')\n", "pytorch", Status.RUNTIME_ERROR, Reason.EXCEPTION),
    "abort": ("import os\ndef run(x):\n    os.abort()\n", "pytorch", Status.CRASHED, Reason.CRASH),
}


def request(name: str, source: str, language: str = "pytorch", task: str = TASK) -> GradeRequest:
    return GradeRequest(attempt_id=name, task_id=task, source=source, language=language, seed=5, timeout_s=60)


def case_requests(suffix: str = "") -> list[GradeRequest]:
    return [request(name + suffix, src, lang) for name, (src, lang, _, _) in CASES.items()]


@pytest.fixture(scope="module")
def backend():
    """One local Ray cluster (started by the backend itself, address=None) and two CPU actors."""
    b = RayGradingBackend(address=None, actors=2, device="cpu", workers_per_actor=1, max_retries=1,
                          max_restarts=2, num_cpus=2, grace_s=60, start_timeout_s=300)
    try:
        info = b.wait_ready()
        assert sorted(info) == ["grader-0", "grader-1"] and all(i["device"] == "cpu" for i in info.values())
        yield b
    finally:
        b.close()
    assert not ray.is_initialized(), "the backend started this cluster, so close() must shut it down"


def grade_in_background(b: RayGradingBackend, reqs: list[GradeRequest],
                        **kw) -> tuple[list[GradedItem], threading.Thread]:
    items: list[GradedItem] = []
    t = threading.Thread(target=lambda: items.extend(b.grade(reqs, **kw)), daemon=True)
    t.start()
    return items, t


def kill_holder(b: RayGradingBackend, attempt_id: str, timeout_s: float = 90.0) -> tuple[str, int]:
    """Wait until `attempt_id` is in flight on some actor, let it start, then kill that actor (Ray restarts it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        holder = next((label for label, ids in b.in_flight().items() if attempt_id in ids), None)
        if holder:
            time.sleep(1.0)  # inside its 5 s sleep in the worker, well before any verdict
            assert attempt_id in b.in_flight().get(holder, []), "the sleeper finished before it could be killed"
            pid = b.info[holder]["pid"]
            ray.kill(b.handles[holder], no_restart=False)
            return holder, pid
        time.sleep(0.05)
    pytest.fail(f"{attempt_id} never went in flight")


def test_same_statuses_as_the_grader_service(backend):
    reqs = case_requests() + [request("unknown_task", HONEST, task="no_such_task")]
    items = list(backend.grade(reqs))
    assert sorted(i.result.attempt_id for i in items) == sorted(r.attempt_id for r in reqs)
    with GraderService(mode="zygote", workers=1, device="cpu") as svc:
        direct = {r.attempt_id: r for r in svc.grade(reqs)}
    for item in items:
        r = item.result
        assert (r.status, r.reason_code) == (direct[r.attempt_id].status, direct[r.attempt_id].reason_code), r.reason
        assert item.retries == 0 and item.lost_s == 0.0 and item.actor in backend.handles
        if r.attempt_id in CASES:
            assert (r.status, r.reason_code) == CASES[r.attempt_id][2:], r.reason
        assert (r.reward > REWARD_FLOOR) == (r.status is Status.CORRECT)
    by_id = {i.result.attempt_id: i.result for i in items}
    assert by_id["unknown_task"].status is Status.INFRA_ERROR
    assert by_id["honest"].sizes and any(s.hidden for s in by_id["honest"].sizes)
    # Pull model: with one slot per actor and both actors up, both take work.
    assert {i.actor for i in items} == set(backend.handles)


def test_actor_killed_mid_batch_loses_and_duplicates_nothing(backend):
    reqs = [request("sleeper", SLEEPER)] + case_requests("-2")
    items, t = grade_in_background(backend, reqs)
    killed, pid_before = kill_holder(backend, "sleeper")
    t.join(timeout=150)
    assert not t.is_alive(), "grading did not finish after the kill"
    ids = [i.result.attempt_id for i in items]
    assert len(ids) == len(set(ids)) == len(reqs), ids
    assert set(ids) == {r.attempt_id for r in reqs}
    by_id = {i.result.attempt_id: i for i in items}
    sleeper = by_id["sleeper"]
    assert sleeper.retries == 1 and sleeper.lost_s > 0.5, sleeper
    assert sleeper.result.status is Status.CORRECT, sleeper.result.reason
    for name, (_, _, status, code) in CASES.items():
        r = by_id[name + "-2"].result
        assert (r.status, r.reason_code) == (status, code), r.reason
    assert sum(i.retries for i in items) >= 1
    # Ray restarts the killed actor: it answers again from a new process with a fresh GraderService.
    assert backend.wait_actor(killed, timeout_s=240)["pid"] != pid_before


def test_attempt_that_exhausts_its_retries_is_an_infra_error(backend):
    reqs = [request("sleeper-doomed", SLEEPER), request("honest-3", HONEST)]
    items, t = grade_in_background(backend, reqs, max_retries=0)
    killed, _ = kill_holder(backend, "sleeper-doomed")
    t.join(timeout=150)
    assert not t.is_alive()
    by_id = {i.result.attempt_id: i for i in items}
    assert len(items) == len(by_id) == 2
    doomed = by_id["sleeper-doomed"]
    r = doomed.result
    assert (r.status, r.reason_code, r.reward) == (Status.INFRA_ERROR, Reason.INFRA, REWARD_FLOOR)
    assert "lost 1 time(s) with max_retries=0" in r.reason and killed in r.reason, r.reason
    assert doomed.retries == 0 and doomed.actor == "" and doomed.lost_s > 0.5
    assert r.task_revision != "unknown" and r.fingerprint_id not in ("", "unknown")
    assert by_id["honest-3"].result.status is Status.CORRECT
