"""Which call of a size is profiled (its ops judged against the card's forbidden ops and the own-kernel rule).

The attempt's first call holds what a process does once (a library's handles set up on its own streams,
autotuning, a CUDA graph captured on a side stream), and a size's first calls hold what runs once per shape
(cuDNN's benchmark search, torch.compile recording a graph): on the H200 real CUDA-L1 attempts were floored
for that set-up alone when the first call (run 18: a quarter of them) or the second (runs 22 and 23) was the
profiled one. Where a size has warm-up pairs (the GPU effort) the profiled call is drawn among the warm-up
and timed calls, after the check calls, so set-up is not judged as the timed calls' work and a candidate that
counts its calls cannot tell which one is watched; its pair is not timed. Without warm-up pairs (the CPU
effort) it is the last check call.
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


def _grade(effort: Effort, **sources: str) -> dict:
    """Each source graded on the softmax card with `effort`, by name."""
    reqs = [GradeRequest(attempt_id=name, task_id="softmax_rows_fp32", source=src, language="pytorch", seed=1,
                         timeout_s=120) for name, src in sources.items()]
    with GraderService(mode="zygote", workers=1, effort=effort) as svc:
        return {r.attempt_id: r for r in svc.grade(reqs)}


def test_the_second_check_call_of_each_size_is_profiled():
    got = _grade(dataclasses.replace(Effort.for_device(False), check_calls=2), after_first=LIBRARY_AFTER_FIRST,
                 only_first=LIBRARY_ONLY_FIRST, second_size=LIBRARY_AT_SECOND_SIZE)
    after = got["after_first"]
    assert (after.status, after.reason_code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP), after.reason
    # at a later size, after the first call there: the library path of the timed calls is still seen
    later = got["second_size"]
    assert (later.status, later.reason_code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP), later.reason
    # the library call in the first call only computed an untimed answer, which was verified like any other
    assert got["only_first"].status is Status.CORRECT, got["only_first"].reason


LIBRARY_IN_CHECKS_ONLY = ("import torch\nCALLS = [0]\ndef run(x):\n    CALLS[0] += 1\n"
                          "    if CALLS[0] <= 2:\n        return torch.softmax(x, -1)\n" + HONEST_BODY)


def test_with_warmup_pairs_a_call_of_the_timing_loop_is_profiled():
    """Two check calls, one warm-up pair, three timed pairs per size: the profiled call is one of the four
    calls after the checks (drawn by the parent), never a check call."""
    effort = dataclasses.replace(Effort.for_device(False), check_calls=2, warmup_pairs=1, min_reps=3, max_reps=3)
    got = _grade(effort, after_first=LIBRARY_AFTER_FIRST, checks_only=LIBRARY_IN_CHECKS_ONLY,
                 second_size=LIBRARY_AT_SECOND_SIZE)
    for name in ("after_first", "second_size"):  # the library path of the timed calls is seen, wherever drawn
        r = got[name]
        assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP), (name, r.reason)
    # the library ran only in the verified check calls: set-up-like work, not what the timed calls do
    assert got["checks_only"].status is Status.CORRECT, got["checks_only"].reason
    # three timed pairs, less the one profiled when the draw fell on a timed call rather than the warm-up
    assert {s.reps for s in got["checks_only"].sizes} <= {2, 3}, got["checks_only"].sizes
