"""Which call of a size is profiled (its ops judged against the card's forbidden ops and the own-kernel rule).

The attempt's first call holds what a process does once (a library's handles set up on its own streams,
autotuning, a CUDA graph captured on a side stream), and the first call at each new size holds what runs
once per shape (cuDNN's benchmark search): on the H200 a quarter of real CUDA-L1 attempts were floored
for that set-up alone (run 18), and one more at a hidden size (run 22). So when a size has two check
calls (the GPU effort), the second one is profiled: a candidate that takes the library path only after
its first call at a size is caught, and set-up is not judged as the timed calls' work.
"""
from __future__ import annotations

import dataclasses

from grader.contract import GradeRequest, Reason, Status
from grader.service import GraderService
from grader.session import Effort

HONEST_BODY = ("    e = (x - x.max(-1, keepdim=True).values).exp()\n"
               "    return e / e.sum(-1, keepdim=True)\n")
LIBRARY_AFTER_FIRST = ("import torch\nCALLS = [0]\ndef run(x):\n    CALLS[0] += 1\n"
                       "    if CALLS[0] > 1:\n        return torch.softmax(x, -1)\n" + HONEST_BODY)
LIBRARY_ONLY_FIRST = ("import torch\nCALLS = [0]\ndef run(x):\n    CALLS[0] += 1\n"
                      "    if CALLS[0] == 1:\n        return torch.softmax(x, -1)\n" + HONEST_BODY)
LIBRARY_AT_SECOND_SIZE = ("import torch\nSHAPES = {}\ndef run(x):\n"
                          "    SHAPES[x.shape] = SHAPES.get(x.shape, 0) + 1\n"
                          "    if len(SHAPES) > 1 and SHAPES[x.shape] > 1:\n        return torch.softmax(x, -1)\n"
                          + HONEST_BODY)


def test_the_second_check_call_of_each_size_is_profiled():
    effort = dataclasses.replace(Effort.for_device(False), check_calls=2)
    reqs = [GradeRequest(attempt_id=name, task_id="softmax_rows_fp32", source=src, language="pytorch", seed=1,
                         timeout_s=120) for name, src in (("after_first", LIBRARY_AFTER_FIRST),
                                                          ("only_first", LIBRARY_ONLY_FIRST),
                                                          ("second_size", LIBRARY_AT_SECOND_SIZE))]
    with GraderService(mode="zygote", workers=1, effort=effort) as svc:
        got = {r.attempt_id: r for r in svc.grade(reqs)}
    after = got["after_first"]
    assert (after.status, after.reason_code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP), after.reason
    # at a later size, after the first call there: the library path of the timed calls is still seen
    later = got["second_size"]
    assert (later.status, later.reason_code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP), later.reason
    # the library call in the first call only computed an untimed answer, which was verified like any other
    assert got["only_first"].status is Status.CORRECT, got["only_first"].reason
