"""Attempts loaded ahead of their grades (`GraderService(load_ahead=True)`, `grader.ahead`): while a slot grades one
attempt, the next one's worker starts, loads it and calls it once at its first size. Each grade must end exactly as
it ends without (the same statuses and reasons), a hostile attempt loaded ahead must not reach the grade running
beside it, and nothing may outlive the service. Real zygotes, uids and namespaces, on the CPU."""
from __future__ import annotations

import os
import time

import pytest

from grader import sandbox
from grader.contract import GradeRequest, Reason, Status
from grader.service import GraderService
from tests.grader.test_spares import HONEST, HOSTILE, TASK

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading ahead needs the root-run sandbox's second uid")

# At its import, which runs ahead while the attempt before it is graded: a process left behind, and every process
# it may reach killed. (HOSTILE does the same at its first call, which is its grade's own.)
HOSTILE_AT_IMPORT = ("import os, signal, time\nif os.fork() == 0:\n    time.sleep(60)\n    os._exit(0)\n"
                     "try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError:\n    pass\n" + HONEST)
# Misbehave on their first call only: the call made ahead is the grade's first check call, checked, observed and
# verified as ever (a first version made an extra, unchecked call ahead and graded these three correct). TAMPERS
# changes the worker's interpreter.
_FIRST = "def run(x):\n    if not DONE:\n        DONE.append(1)\n        "
FIRST_RAISES = "DONE = []\n" + HONEST.replace("def run(x):\n", _FIRST + "raise RuntimeError('first')\n")
FIRST_WRONG = "DONE = []\n" + HONEST.replace("def run(x):\n", _FIRST + "return torch.zeros_like(x)\n")
FIRST_FORBIDDEN = "DONE = []\n" + HONEST.replace("def run(x):\n", _FIRST + "return x.softmax(-1)\n")
TAMPERS = "DONE = []\n" + HONEST.replace("def run(x):\n", _FIRST + "torch.Tensor.clone = lambda self: self\n")
# Answers zeros on its first call and writes a launch record with a key of no kind: a second review found that made
# the grade's head raise what it did not keep, so the grade made its "first" call again and graded this correct.
ODD_RECORD = ("def _odd():\n    import inspect, triton.runtime.jit as j\n"
              "    inspect.getclosurevars(j.JITFunction.run).globals['LAUNCHES']['odd'] = 1\n"
              "DONE = []\n" + HONEST.replace("def run(x):\n", _FIRST + "_odd()\n        return torch.zeros_like(x)\n"))
CRASHES = HONEST.replace("def run(x):\n", "def run(x):\n    import os\n    os._exit(3)\n")
RAISES = HONEST.replace("def run(x):\n", "def run(x):\n    raise ValueError('no')\n")
HANGS_AT_IMPORT = "import time\ntime.sleep(600)\n" + HONEST
WRONG = HONEST.replace("return e / e.sum(-1, keepdim=True)", "return e")
BROKEN = "import torch\ndef run(x):\n    return (\n"


def _nothing_left(uids) -> bool:
    """No process of `uids` alive, within a few seconds: a process killed as its service closed takes a moment to
    end (the next service may claim the same uids)."""
    deadline = time.monotonic() + 5.0
    while any(sandbox.uid_pids(uid) for uid in uids if uid is not None) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(sandbox.uid_pids(uid) for uid in uids if uid is not None)


def _grade(sources: list[str], load_ahead: bool, timeout_s: float = 120.0) -> tuple[list, list, object]:
    with GraderService(mode="zygote", workers=1, spare_workers=True, load_ahead=load_ahead) as svc:
        slot = svc.slots[0]
        reqs = [GradeRequest(attempt_id=f"a{i}", task_id=TASK, source=src, language="pytorch", timeout_s=timeout_s)
                for i, src in enumerate(sources)]
        results = sorted(svc.grade(reqs), key=lambda r: int(r.attempt_id[1:]))
        uids = (slot.uid, slot.spare_uid)
        # one output arena, or one per candidate uid when two workers may be alive at once
        assert len(slot._out_arenas) == (2 if load_ahead else 1), slot._out_arenas
    return results, [r.sandbox.get("worker") for r in results], uids


def test_attempts_loaded_ahead_grade_as_they_do_without_and_a_hostile_one_reaches_nothing_beside_it():
    sources = [HONEST, HOSTILE_AT_IMPORT, HONEST, HOSTILE, TAMPERS, CRASHES, RAISES, WRONG, BROKEN, FIRST_RAISES,
               FIRST_WRONG, FIRST_FORBIDDEN, ODD_RECORD, HONEST, HONEST]
    ahead, workers, uids = _grade(sources, load_ahead=True)
    plain, plain_workers, _ = _grade(sources, load_ahead=False)
    assert [(r.status, r.reason_code) for r in ahead] == [(r.status, r.reason_code) for r in plain], \
        [(r.attempt_id, r.status, r.reason) for r in ahead]
    assert "loaded ahead" not in plain_workers
    # With one slot, every attempt but the first and the last (which wait for no other) is loaded ahead.
    assert workers[0] != "loaded ahead" and workers[-1] != "loaded ahead"
    assert workers[1:-1] == ["loaded ahead"] * (len(sources) - 2), workers
    # The hostile import ran ahead, while the first attempt was graded: that grade is untouched.
    assert ahead[0].status is Status.CORRECT, ahead[0].reason
    assert ahead[1].status is Status.CHEAT_FLAGGED and ahead[2].status is Status.CORRECT, ahead[2].reason
    assert ahead[3].status is not Status.CORRECT
    assert (ahead[4].status, ahead[4].reason_code) == (Status.CHEAT_FLAGGED, Reason.INTERPRETER), ahead[4].reason
    assert ahead[5].status is Status.CRASHED and ahead[6].status is Status.RUNTIME_ERROR
    assert ahead[7].status is Status.WRONG_OUTPUT and ahead[8].status is Status.COMPILE_ERROR
    assert [r.status for r in ahead[9:13]] == [Status.RUNTIME_ERROR, Status.WRONG_OUTPUT, Status.CHEAT_FLAGGED,
                                               Status.WRONG_OUTPUT]
    spent = ahead[2].sandbox["ahead_s"]
    # the grade's head was made ahead: its first size planned, trimmed and observed, its first check call made
    assert set(spent) == {"startup", "load", "first size", "first call"} and all(v >= 0 for v in spent.values()), spent
    assert _nothing_left(uids)  # nothing of either candidate uid outlives the service


def test_an_attempt_that_hangs_loading_ahead_times_out_on_its_own_budget():
    """Its import hangs ahead, while the first attempt is graded: it times out as it does loaded in its grade, on its
    own budget counted from its start ahead, and the attempts around it grade correct."""
    sources = [HONEST, HANGS_AT_IMPORT, HONEST, HONEST]
    ahead, workers, uids = _grade(sources, load_ahead=True, timeout_s=8.0)
    plain, _, _ = _grade(sources, load_ahead=False, timeout_s=8.0)
    assert workers[1] == "loaded ahead"
    assert [r.status for r in ahead] == [r.status for r in plain] == [
        Status.CORRECT, Status.TIMEOUT, Status.CORRECT, Status.CORRECT], [(r.status, r.reason) for r in ahead]
    assert _nothing_left(uids)


def test_a_request_taken_ahead_whose_preparation_cannot_start_is_graded_as_without():
    """What fails in starting a preparation (here: every one) ends no grade and loses no request: each attempt taken
    ahead is graded next, its worker its own."""
    def broken(*_):
        raise RuntimeError("can't start new thread")

    with GraderService(mode="zygote", workers=1, spare_workers=True, load_ahead=True) as svc:
        svc._prepare = broken
        results = list(svc.grade([GradeRequest(attempt_id=f"p{i}", task_id=TASK, source=HONEST, language="pytorch")
                                  for i in range(4)]))
    assert sorted(r.attempt_id for r in results) == ["p0", "p1", "p2", "p3"]
    assert all(r.status is Status.CORRECT for r in results), [(r.status, r.reason) for r in results]
    assert "loaded ahead" not in {r.sandbox.get("worker") for r in results}


TAMPERS_AT_IMPORT = "import torch\ntorch.Tensor.clone = lambda self: self\n" + HONEST
SLOW = "import time\n" + HONEST.replace("def run(x):\n", "def run(x):\n    time.sleep(0.3)\n")  # seconds a grade


def test_a_preparation_that_floors_its_attempt_stops_its_worker_at_once():
    """An import that changes the interpreter is floored by the load's check, ahead: its worker (alive, and the
    candidate's code in it) is killed as the preparation ends, not when its grade begins, beside the grade before it;
    its grade is floored as without load ahead. The grade before it (SLOW) is still running when that is looked at."""
    import threading

    from grader import ahead as ahead_module

    seen: list = []
    real = ahead_module.prepare

    def watched(*args, **kwargs):
        prepared = real(*args, **kwargs)

        def after() -> None:
            prepared.join()
            deadline = time.monotonic() + 2.0  # a process killed takes a moment to be a zombie; SLOW's grade runs on
            while sandbox.uid_pids(prepared.conn.uid) and time.monotonic() < deadline:
                time.sleep(0.05)
            seen.append((prepared.req.attempt_id, prepared.error is not None, sandbox.uid_pids(prepared.conn.uid)))

        threading.Thread(target=after, daemon=True).start()
        return prepared

    ahead_module.prepare = watched
    try:
        results, workers, _ = _grade([SLOW, TAMPERS_AT_IMPORT, HONEST, HONEST], load_ahead=True)
        plain, _, _ = _grade([SLOW, TAMPERS_AT_IMPORT, HONEST, HONEST], load_ahead=False)
    finally:
        ahead_module.prepare = real
    assert workers[1] == "loaded ahead" and results[1].status is Status.CHEAT_FLAGGED, results[1].reason
    assert [(r.status, r.reason_code) for r in results] == [(r.status, r.reason_code) for r in plain]
    stopped = {aid: left for aid, floored, left in seen if floored}
    assert stopped == {"a1": []}, seen  # floored ahead, it had nothing left alive once its preparation ended
