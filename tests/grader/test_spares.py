"""Spare workers (`GraderService(spare_workers=True)`, `Slot.spawn`): each slot starts its next candidate's worker
while it grades, under the other of its two candidate uids, and the next grade takes it.

On by default only on a GPU (a start-up there takes seconds of CUDA); switched on here to test the same code on the
CPU, with real zygotes, uids and namespaces.
"""
from __future__ import annotations

import os

import pytest

from grader import sandbox
from grader.contract import GradeRequest, Status
from grader.service import GraderService
from tests.grader.sources import HONEST_SOFTMAX

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="spares need the root-run sandbox's uids")

TASK = "softmax_rows_fp32"
HONEST = HONEST_SOFTMAX
# Leaves processes behind and signals every process it may: the spare for the next grade is running meanwhile.
HOSTILE = ("import os, signal, time\n" + HONEST.replace(
    "def run(x):\n", "def run(x):\n    if os.fork() == 0:\n        time.sleep(60)\n        os._exit(0)\n"
                     "    try:\n        os.kill(-1, signal.SIGKILL)\n    except OSError:\n        pass\n"))


def test_the_next_grade_takes_a_spare_under_the_other_uid_that_a_hostile_candidate_cannot_reach():
    with GraderService(mode="zygote", workers=1, spare_workers=True) as svc:
        slot = svc.slots[0]
        assert slot.spares and slot.spare_uid not in (None, slot.uid)
        results = list(svc.grade([GradeRequest(attempt_id=f"a{i}", task_id=TASK, source=src, language="pytorch")
                                  for i, src in enumerate((HONEST, HOSTILE, HONEST))]))
        first, hostile, after = results
        assert first.status is Status.CORRECT, first.reason
        assert [r.sandbox.get("worker") for r in results] == ["spawned", "spare", "spare"]
        # The hostile grade is floored for what it did, and the spare that ran beside it was untouched: the third
        # grade took it and graded as if nothing had happened.
        assert hostile.status is not Status.CORRECT
        assert after.status is Status.CORRECT, after.reason
        # A spare is ready again, under the uid the last grade did not use; nothing else of either uid lives.
        thread, box, _ = slot._spare
        thread.join()
        uid = box[0].uid
        assert uid in (slot.uid, slot.spare_uid)
        other = slot.spare_uid if uid == slot.uid else slot.uid
        assert sandbox.uid_pids(uid) == [box[0].pid] and not sandbox.uid_pids(other)
    assert not sandbox.uid_pids(slot.uid) and not sandbox.uid_pids(slot.spare_uid)  # the spare ends with the service


def test_without_spares_every_grade_spawns_its_worker():
    with GraderService(mode="zygote", workers=1, spare_workers=False) as svc:
        assert svc.slots[0].spare_uid is None
        results = list(svc.grade([GradeRequest(attempt_id=f"b{i}", task_id=TASK, source=HONEST, language="pytorch")
                                  for i in range(2)]))
    assert [r.sandbox.get("worker") for r in results] == ["spawned", "spawned"]
    assert all(r.status is Status.CORRECT for r in results)
