"""The roles the device watch reads (`GraderService.roles`, `Slot.seen_roles`): a worker that ended during a timing
loop, or one still starting, is this service's, not "not ours". In H100 run 97 (2026-12-06) 55 of the 78 pids the
watch called "not ours" were the service's own workers, seen under their roles in other loops, and the acceptance's
table of the device's memory by kind of process gave 7.1 GiB to "not ours", which reads as another tenant.

Real zygote workers on the CPU: the roles are bookkeeping of the parent's, the same on either device.
"""
from __future__ import annotations

import os

import pytest

from grader import launcher, wire
from grader.contract import GradeRequest, Status
from grader.service import GraderService
from tests.grader.sources import HONEST_SOFTMAX

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote's workers need the root-run sandbox")

TASK = "softmax_rows_fp32"
HONEST = HONEST_SOFTMAX


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_ended_and_starting_workers_keep_their_slot_and_role(monkeypatch):
    seen_starting: list[dict[int, str]] = []
    recv = wire.recv

    def recv_noting_roles(sock, *args, **kwargs):  # a worker's hello is the first thing read from it
        seen_starting.append(svc.roles())
        return recv(sock, *args, **kwargs)

    with GraderService(mode="zygote", workers=1, spare_workers=False) as svc:
        monkeypatch.setattr(launcher.wire, "recv", recv_noting_roles)
        results = list(svc.grade([GradeRequest(attempt_id=f"s{i}", task_id=TASK, source=HONEST, language="pytorch")
                                  for i in range(2)]))
        monkeypatch.setattr(launcher.wire, "recv", recv)
        assert all(r.status is Status.CORRECT for r in results), [(r.status, r.reason) for r in results]
        roles = svc.roles()
        ended = [pid for pid, role in roles.items() if role == "slot 0 candidate, ended"]
        # both candidates' workers ended with their grades, and are named so, not left out as another tenant's
        assert len(ended) == 2 and all(_gone(pid) for pid in ended), roles
        # the task's one worker for its expert and reference (`task_workers`, on by default)
        assert {roles[pid] for pid in roles if pid not in ended} >= {"parent", "slot 0 task"}
        starting = {role for snap in seen_starting for role in snap.values() if role.endswith(", starting")}
        assert {"slot 0 candidate, starting", "slot 0 task, starting"} <= starting
        assert not any(role.endswith(", starting") for role in roles.values())  # none is left once said hello


def test_a_slot_names_only_its_last_ended_workers(monkeypatch):
    with GraderService(mode="zygote", workers=1, spare_workers=False) as svc:
        slot = svc.slots[0]
        monkeypatch.setattr(launcher.Slot, "ENDED_NAMED", 3)
        for pid in range(10_000_000, 10_000_005):  # pids no process has: bookkeeping only
            slot.live[pid] = "candidate"
            assert slot._gone(pid) == "candidate"
        assert list(slot.ended) == [10_000_002, 10_000_003, 10_000_004]
        slot.live[10_000_003] = "spare"  # a pid taken again: the live worker's role wins
        assert slot.seen_roles()[10_000_003] == "spare" and slot.seen_roles()[10_000_004] == "candidate, ended"
