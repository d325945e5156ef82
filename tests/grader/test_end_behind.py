"""Ends behind (`GraderService(end_behind=True)`, `Slot._end`): a worker the slot is done with is signalled at once
and reaped on a thread of its own, while the slot grades on. Off until a GPU run has measured it; switched on here to
test the same code on the CPU, with real zygotes, uids and namespaces."""
from __future__ import annotations

import os
import time

import pytest

from grader import launcher, sandbox
from grader.contract import GradeRequest, Status
from grader.service import GraderService
from tests.grader.test_spares import HONEST, HOSTILE, TASK

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="ends behind are keyed by the root-run sandbox's uids")


def _count(svc, purpose: str) -> int:
    return svc.gpu_lock.stats()["purposes"].get(purpose, (0, 0.0))[0]


def _slow_ends(monkeypatch, extra_s: float) -> None:
    """Each end behind waits `extra_s` longer for its worker, as a device context torn down for seconds would."""
    waited = launcher._wait_ended

    def slow(pid: int, timeout_s: float) -> None:
        waited(pid, timeout_s)
        time.sleep(extra_s)

    monkeypatch.setattr(launcher, "_wait_ended", slow)


def test_a_hostile_candidates_processes_are_gone_when_its_grade_returns_though_its_reap_is_still_to_come(monkeypatch):
    _slow_ends(monkeypatch, 3.0)
    with GraderService(mode="zygote", workers=1, spare_workers=True, end_behind=True) as svc:
        slot = svc.slots[0]
        first, hostile = svc.grade([GradeRequest(attempt_id=f"e{i}", task_id=TASK, source=src, language="pytorch")
                                    for i, src in enumerate((HONEST, HOSTILE))])
        time.sleep(0.3)
        assert any(t.is_alive() for ends in slot._ending.values() for t in ends)  # its reap is still to come
        thread, box, _ = slot._spare
        thread.join()
        # Nothing of either candidate uid runs but the spare booted for the next grade: the hostile grade's fork
        # (which sleeps 60 s) was signalled before its grade came back.
        running = [p for uid in (slot.uid, slot.spare_uid) for p in sandbox.uid_pids(uid)]
        assert running == [box[0].pid], running
        assert first.status is Status.CORRECT, first.reason
        assert hostile.status is not Status.CORRECT
        for key in list(slot._ending):
            slot._await_ended(key)
        assert _count(svc, "worker end, candidate: signalled (reaped behind)") == 2
        assert _count(svc, "worker end, candidate: reaped behind") == 2
        # every ended candidate reaped (none left as a zombie): the task's kept workers and the spare live on
        assert sorted(role for pid, role in slot.live.items() if pid != box[0].pid) == ["expert", "reference"]
    assert not sandbox.uid_pids(slot.uid) and not sandbox.uid_pids(slot.spare_uid)


def test_no_worker_is_lent_an_arena_or_started_under_a_uid_before_the_last_end_under_it_is_over(monkeypatch):
    """A slow end (a device context torn down for seconds) is waited for before its uid starts a worker again and
    before its arena, which the end scrubs, is lent again: every grade's outputs come through whole."""
    _slow_ends(monkeypatch, 3.0)
    with GraderService(mode="zygote", workers=1, spare_workers=True, end_behind=True) as svc:
        results = list(svc.grade([GradeRequest(attempt_id=f"s{i}", task_id=TASK, source=HONEST, language="pytorch")
                                  for i in range(4)]))
        assert [r.status for r in results] == [Status.CORRECT] * 4, [r.reason for r in results]
        # the ends of the first two grades were over before their uids' next workers started (they wait for them)
        assert _count(svc, "worker end, candidate: reaped behind") >= 2


def test_a_crashed_worker_is_still_reaped_at_once_for_how_it_ended():
    crash = "import os\ndef run(x):\n    os._exit(7)\n"
    with GraderService(mode="zygote", workers=1, spare_workers=True, end_behind=True) as svc:
        (r,) = svc.grade([GradeRequest(attempt_id="c0", task_id=TASK, source=crash, language="pytorch")])
        assert _count(svc, "worker end, candidate: signalled (reaped behind)") == 0
    assert r.status is Status.CRASHED and "exited with code 7" in r.reason, r.reason
