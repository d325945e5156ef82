"""`Effort.host_verify`: a verification reads the output, the inputs drawn again and the reference's answer onto the
host and compares them there, so that only device work takes a window (`session._verify`). On the CPU the device is
the host already: what changes is which pieces take a check window, which the lock counts by their work
(`DeviceLock.stats()["draws_by"]`), and the verdicts must not change at all."""
from __future__ import annotations

import dataclasses

import pytest

from grader.contract import GradeRequest, Reason, Status
from grader.service import GraderService
from grader.session import Effort
from tests.grader.sources import HONEST_SOFTMAX

TASK = "softmax_rows_fp32"
HONEST = HONEST_SOFTMAX
ATTEMPTS = {  # name: (source, status, reason)
    "honest": (HONEST, Status.CORRECT, Reason.OK),
    "unnormalised": (HONEST.replace("return e / e.sum(-1, keepdim=True)", "return e"), Status.WRONG_OUTPUT,
                     Reason.MISMATCH),
    "scribbles_on_its_input": (HONEST.replace("    e = ", "    x.mul_(1.5)\n    e = "), Status.CHEAT_FLAGGED,
                               Reason.INPUT_MUTATED),
}


@pytest.fixture(scope="module", params=[False, True], ids=["on the device", "on the host"])
def graded(request):
    """Every attempt graded by a service of one slot with `host_verify` off, then on; the lock's draws by work."""
    effort = dataclasses.replace(Effort.for_device(False), host_verify=request.param)
    with GraderService(mode="zygote", workers=1, effort=effort) as svc:
        results = {name: svc.grade_one(GradeRequest(attempt_id=f"{name}.{request.param}", task_id=TASK, source=src,
                                                    language="pytorch"))
                   for name, (src, _, _) in ATTEMPTS.items()}
        again = svc.grade_one(GradeRequest(attempt_id=f"again.{request.param}", task_id=TASK, source=HONEST,
                                           language="pytorch"))
        yield request.param, results, again, svc.gpu_lock.stats()["draws_by"]


def test_the_verdicts_are_the_same_wherever_the_comparison_runs(graded):
    host, results, again, _ = graded
    for name, (_, status, reason) in ATTEMPTS.items():
        r = results[name]
        assert (r.status, r.reason_code) == (status, reason), (host, name, r.status, r.reason)
    assert again.status is Status.CORRECT, again.reason


def test_on_the_host_only_the_workers_device_work_takes_a_check_window(graded):
    """Off, the comparison takes a window of its own; on, it takes none, nor does a kept answer, while the fetch (the
    worker's copy out), the inputs drawn again and the reference's run still take theirs."""
    host, _, _, draws_by = graded
    taken = {k for k, (n, _) in draws_by.items() if n}
    assert {"check window: fetch", "check window: inputs"} <= taken, draws_by
    # the reference's run, labelled apart where its worker last answered at another size (it allocates afresh)
    assert {"check window: reference", "check window: reference, at a size new to its worker"} & taken, draws_by
    # the unnormalised output's mismatch asks the expert how far it gets: its call and fetch in a window of their own
    # either way, never inside the comparison's (its first call at a size compiles, in none)
    assert "check window: expert's output" in taken, draws_by
    if host:
        assert not {"check window: compare", "check window: kept answer and compare"} & taken, draws_by
    else:
        assert "check window: compare" in taken, draws_by
