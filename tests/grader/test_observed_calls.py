"""Which calls are observed (grader/observe.py), and what the observation of a call records.

The check calls and warm-up calls of every size, of the candidate and of its twin alike, run under a
profiler session of all threads' ops, and so does one call drawn by the parent among the warm-up and timed
calls (after the check calls), which also has the device traced and whose pair is not timed. The other
timed calls run unrecorded: a recording over them slowed a 40 us kernel to 0.1-0.4 ms on the H200 (runs 26
and 27). Python reads the same profiler state in every call. The attribution of a session's records to calls
is tested on recorded events too: the main thread is the one that opened the session, so marks a candidate
records under the worker's names are not windows.
"""
from __future__ import annotations

import dataclasses

import pytest

from grader.contract import GradeRequest, Reason, Status
from grader.observe import CALL_MARK, RETURN_MARK, WORKER_MARK, Event, attribute
from grader.service import GraderService
from grader.session import Effort

HONEST_BODY = ("    e = (x - x.amax(-1, keepdim=True)).exp()\n"
               "    return e / e.sum(-1, keepdim=True)\n")
LIBRARY_AFTER_FIRST = ("import torch\nCALLS = [0]\ndef run(x):\n    CALLS[0] += 1\n"
                       "    if CALLS[0] > 1:\n        return torch.softmax(x, -1)\n" + HONEST_BODY)
LIBRARY_ONLY_FIRST = ("import torch\nCALLS = [0]\ndef run(x):\n    CALLS[0] += 1\n"
                      "    if CALLS[0] == 1:\n        return torch.softmax(x, -1)\n" + HONEST_BODY)
LIBRARY_AT_SECOND_SIZE = ("import torch\nSHAPES = {}\ndef run(x):\n"
                          "    SHAPES[x.shape] = SHAPES.get(x.shape, 0) + 1\n"
                          "    if len(SHAPES) > 1 and SHAPES[x.shape] > 1:\n        return torch.softmax(x, -1)\n"
                          + HONEST_BODY)
HONEST = "import torch\ndef run(x):\n" + HONEST_BODY


def _grade(effort: Effort, looped: dict | None = None, **sources: str) -> dict:
    """Each source graded on the softmax card with `effort`, by name, one after the other; with `looped`, the seconds
    each held the device for timing loops (on the CPU every loop holds it `exclusive`), by name."""
    out = {}
    with GraderService(mode="zygote", workers=1, effort=effort) as svc:
        for name, src in sources.items():
            before = svc.gpu_lock.stats()["exclusive_s"]
            out[name] = svc.grade_one(GradeRequest(attempt_id=name, task_id="softmax_rows_fp32", source=src,
                                                   language="pytorch", seed=1, timeout_s=120))
            if looped is not None:
                looped[name] = svc.gpu_lock.stats()["exclusive_s"] - before
    return out


@pytest.mark.xdist_group("observed_calls")
def test_a_library_op_in_an_observed_call_floors():
    """Two check calls, one warm-up pair, three timed pairs per size: the library in the first call (a check
    call), from the second call on, or at the second size is seen; the honest kernel keeps every timed pair but
    the drawn one (which is the warm-up pair a quarter of the time). With the first size's check calls judged before
    its timing loop (`Effort.judge_first`, as on a GPU), a candidate whose first call ran the library holds the
    device for no loop at all, where the honest one's loops do."""
    effort = dataclasses.replace(Effort.for_device(False), check_calls=2, warmup_pairs=1, min_reps=3, max_reps=3,
                                 judge_first=True)
    looped: dict[str, float] = {}
    got = _grade(effort, looped, after_first=LIBRARY_AFTER_FIRST, only_first=LIBRARY_ONLY_FIRST,
                 second_size=LIBRARY_AT_SECOND_SIZE, honest=HONEST)
    for name in ("after_first", "only_first", "second_size"):
        r = got[name]
        assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP), (name, r.reason)
        assert "call " in r.reason and "aten::softmax" in r.reason, r.reason  # names the call and the op
    honest = got["honest"]
    assert honest.status is Status.CORRECT, honest.reason
    assert {s.reps for s in honest.sizes} <= {2, 3}, honest.sizes
    assert "(check)" in got["only_first"].reason, got["only_first"].reason
    assert looped["only_first"] == 0.0 < looped["honest"], looped


@pytest.mark.xdist_group("observed_calls")
def test_an_extract_max_top_k_that_knocks_out_by_index_put_is_honest():
    """`x[rows, idx] = -inf` runs aten::index_put_, data movement the card's indexing group allows; H200 run 39
    floored this demo attempt `forbidden_op` when the group lacked it."""
    from pathlib import Path

    source = (Path(__file__).parents[2] / "demo" / "candidates" / "topk_values_fp32" / "iterative_torch.py").read_text()
    req = GradeRequest(attempt_id="iterative_topk", task_id="topk_values_fp32", source=source, language="pytorch",
                       seed=1, timeout_s=120)
    with GraderService(mode="zygote", workers=1) as svc:
        r = svc.grade_one(req)
    assert r.status is Status.CORRECT, r.reason


def _ev(name, thread, start, end=None, device=False, stream=None):
    return Event(name, thread, start, start if end is None else end, device, stream)


def test_attribution_by_window_on_the_thread_that_opened_the_session():
    events = [
        _ev(WORKER_MARK, 1, 0, 1), _ev(WORKER_MARK, 0, 0, 2, True, 3), _ev("marker", 0, 1, 2, True, 7),
        _ev(CALL_MARK, 0, 10, 20, True, 7),  # the device's annotation of a range: not a kernel
        _ev(CALL_MARK, 1, 10, 20), _ev("aten::exp", 2, 11, 12), _ev(RETURN_MARK, 2, 13),
        _ev("own_kernel", 0, 12, 13, True, 7), _ev("side", 0, 14, 15, True, 9),
        _ev(CALL_MARK, 1, 30, 40), _ev("aten::softmax", 3, 31, 32), _ev(RETURN_MARK, 3, 33),
        # a candidate thread recording the worker's own names: neither a window nor a way to hide its ops
        _ev(WORKER_MARK, 3, 34), _ev(CALL_MARK, 3, 35, 36), _ev("aten::mm", 3, 35, 36),
        _ev("aten::add", 1, 37),  # the main thread's own op: never the candidate's
    ]
    first, second, third = attribute(events, ["check", "timed", "timed"])
    assert first == {"tag": "check", "seen": True, "returned": True, "ops": ["aten::exp"],
                     "kernels": ["own_kernel", "side"], "foreign": ["side"]}
    assert second["ops"] == ["aten::mm", "aten::softmax"] and second["returned"] and not second["kernels"]
    # a call the record has no window for ran with the recording off
    assert (third["seen"], third["returned"]) == (False, False)


def test_a_call_whose_thread_stopped_recording_has_no_return_mark():
    events = [_ev(WORKER_MARK, 1, 0, 1), _ev(CALL_MARK, 1, 10, 20), _ev("aten::exp", 2, 11)]
    (call,) = attribute(events, ["timed"])
    assert call["seen"] and not call["returned"]


def _judged(language: str, build_failed: str, ops: list[str]):
    """The floor `_judge_observed` raises for one check call on the softmax card with `ops` observed."""
    from types import SimpleNamespace

    from grader.catalogue import load_catalogue
    from grader.session import Floor, _judge_observed

    card = load_catalogue()["softmax_rows_fp32"]
    g = SimpleNamespace(task=SimpleNamespace(card=card), req=SimpleNamespace(language=language),
                        build_failed=build_failed, own_kernels=["row_softmax_kernel"], kernels=[])
    sz = SimpleNamespace(label="M=8,N=8")
    with pytest.raises(Floor) as caught:
        _judge_observed(g, sz, [{"tag": "check", "seen": True, "returned": True, "ops": ops}])
    return caught.value


def test_a_cuda_fallback_after_a_failed_build_is_a_build_failure():
    """CUDA-L1's attempts catch their extension's build error and call PyTorch: that is labelled a failed build
    (same floor), and the reason says both what failed to build and what ran; without a failed build, or for a
    PyTorch candidate, the same ops are the cheat they were."""
    error = "main.cpp:4:46: error: 'forward' was not declared in this scope"
    failed = _judged("cuda", error, ["aten::softmax", "aten::_softmax"])
    assert (failed.status, failed.code) == (Status.COMPILE_ERROR, Reason.COMPILE)
    assert "failed to build" in failed.reason and "forward" in failed.reason and "aten::softmax" in failed.reason
    cheat = _judged("cuda", "", ["aten::softmax", "aten::_softmax"])
    assert (cheat.status, cheat.code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP)
    library = _judged("cuda", "", ["aten::exp"])
    assert (library.status, library.code) == (Status.CHEAT_FLAGGED, Reason.LIBRARY_COMPUTE)
    assert _judged("cuda", error, ["aten::exp"]).status is Status.COMPILE_ERROR
    pytorch = _judged("pytorch", error, ["aten::softmax"])
    assert (pytorch.status, pytorch.code) == (Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP)


def test_a_cuda_fallbacks_wrong_output_after_a_failed_build_is_the_same_build_failure():
    """Whichever fault of the code run instead of a failed build is found first, a rule broken or a wrong output, the
    label is one (`session._built_instead`): CUDA-L1's L1:T50 (torch.prod after its build failed) was a build failure
    in H100 run 93 and a wrong output in run 94. The check calls' and timed calls' verifications and the output's
    shape check raise through it; on the CPU no cuda candidate grades, so this checks the relabelling itself."""
    from types import SimpleNamespace

    from grader.session import Floor, _built_instead

    error = "main.cpp:11:1: error: redefinition of 'int pybind11_exec_product_cuda(PyObject*)'"
    wrong = Floor(Status.WRONG_OUTPUT, Reason.NONFINITE, "size M=8,N=8: 1 of 64 elements are NaN/Inf")

    def judged(language: str, build_failed: str) -> Floor:
        g = SimpleNamespace(req=SimpleNamespace(language=language), build_failed=build_failed)
        return _built_instead(g, wrong, "gave a wrong output")

    failed = judged("cuda", error)
    assert (failed.status, failed.code) == (Status.COMPILE_ERROR, Reason.COMPILE)
    assert "redefinition" in failed.reason and "gave a wrong output: size M=8,N=8: 1 of 64" in failed.reason
    assert judged("cuda", "") is wrong and judged("pytorch", error) is wrong and judged("triton", error) is wrong


def test_code_torch_generated_in_an_observed_call_floors_whatever_the_language():
    """A compiled region records none of the ops it computes (the source refusal of torch.compile is the
    first line; this is the one behind it, for code that reached the compiler by another name)."""
    recorded = ["TorchDynamo Cache Lookup", "Torch-Compiled Region: 0/0", "Pregraph bytecode",
                "## Call CompiledFxGraph fg6gi3a7gghpbw4kir2fnu5bolnayrjr4wpv4lpklgmdovbfsbwj ##"]  # torch 2.13, CPU
    for language in ("pytorch", "triton", "cuda"):
        for records in (recorded, recorded[3:]):  # the whole region, or a compiled graph called alone
            floor = _judged(language, "", ["aten::exp", *records])
            assert (floor.status, floor.code) == (Status.CHEAT_FLAGGED, Reason.LIBRARY_COMPUTE), language
            assert "CompiledFxGraph" in floor.reason or "Torch-Compiled Region" in floor.reason
