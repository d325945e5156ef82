"""Unit tests of the grader's pure parts: the contract, the reward, comparison, statics, wire."""
from __future__ import annotations

import json
import math
import os
import socket
from pathlib import Path

import pytest
import torch

from grader import fingerprint, wire
from grader.compare import check_output_meta, compare
from grader.contract import (REWARD_FLOOR, GradeResult, Reason, SizeResult, Status, clip_speedup, request_from_json,
                             reward)
from grader.inputs import make_inputs
from grader.statics import static_findings
from grader.timing import median, median_ci


def _result(**kw) -> GradeResult:
    base = dict(attempt_id="a1", task_id="t", task_revision="r", grader_version="v", status=Status.CORRECT,
                reason_code=Reason.OK, reason="ok", reward=1.0, seed=0, profile="cpu", device="cpu",
                fingerprint_id="f",
                sizes=[SizeResult("M=1", False, 1.0, 2.0, speedup=2.0)])
    base.update(kw)
    return GradeResult(**base)


def test_reward_is_log2_geomean_of_clipped_speedups():
    assert reward(Status.CORRECT, [2.0, 8.0]) == pytest.approx(2.0)
    assert reward(Status.CORRECT, [1000.0]) == pytest.approx(math.log2(8.0))  # clipped at 8x
    assert reward(Status.CORRECT, [1e-9]) == pytest.approx(-6.0)
    for st in Status:
        if st is not Status.CORRECT:
            assert reward(st, [4.0]) == REWARD_FLOOR
    assert clip_speedup(0.5) == 0.5


def test_result_cross_field_rules():
    r = _result()
    assert GradeResult.from_json(r.to_json()) == r
    with pytest.raises(ValueError, match="reward"):
        _result(reward=0.5)  # does not match its timings
    with pytest.raises(ValueError, match="must have reward"):
        _result(status=Status.WRONG_OUTPUT, reason_code=Reason.MISMATCH, reward=0.0, sizes=[])
    with pytest.raises(ValueError, match="per-size timings"):
        _result(sizes=[])
    with pytest.raises(ValueError, match="reason"):
        _result(reason="")
    with pytest.raises(ValueError):
        _result(status="fast_enough")  # closed enum


def test_request_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown fields"):
        request_from_json(json.dumps({"attempt_id": "a", "task_id": "t", "source": "", "hidden_sizes": [1]}))


@pytest.mark.parametrize("out,code", [
    (lambda r: r.clone(), Reason.OK),
    (lambda r: r + 1e-3, Reason.MISMATCH),
    (lambda r: torch.zeros_like(r), Reason.CONSTANT_OUTPUT),
    (lambda r: torch.where(torch.arange(r.numel()).reshape(r.shape) % 7 == 0, torch.nan, r), Reason.UNWRITTEN),
    (lambda r: torch.where(torch.arange(r.numel()).reshape(r.shape) == 3, torch.inf, r), Reason.NONFINITE),
])
def test_compare_every_element(out, code):
    ref = torch.randn(16, 32, dtype=torch.float64) * 3 + 1
    v = compare(out(ref).float(), ref, 1e-5, 1e-4)
    assert v.reason_code is code
    assert v.ok is (code is Reason.OK)


def test_compare_single_wrong_element_fails():
    ref = torch.randn(64, 64, dtype=torch.float64)
    out = ref.clone()
    out[63, 63] += 1.0
    assert not compare(out, ref, 1e-5, 1e-4).ok


def test_output_meta_checks():
    assert check_output_meta({"type": "Tensor", "shape": [2, 3], "dtype": "float32"}, (2, 3), "float32", True) is None
    assert check_output_meta({"type": "LazyTensor"}, (2, 3), "float32", True).reason_code is Reason.BAD_OUTPUT
    assert "shape" in check_output_meta({"type": "Tensor", "shape": [3, 2], "dtype": "float32"}, (2, 3),
                                        "float32", True).detail
    assert "dtype" in check_output_meta({"type": "Tensor", "shape": [2, 3], "dtype": "float16"}, (2, 3),
                                        "float32", True).detail
    assert "device" in check_output_meta({"type": "Tensor", "shape": [2, 3], "dtype": "float32"}, (2, 3),
                                         "float32", False).detail


def test_inputs_are_reproducible_fresh_and_not_centred():
    spec = [{"shape": [64, 64], "dtype": "float32", "dist": "normal", "mean": [-2, 2], "std": [0.5, 2],
             "low": 0, "high": 1}, {"shape": [64], "dtype": "int64", "dist": "randint", "mean": [0, 0],
                                    "std": [1, 1], "low": 0, "high": 10}]
    a, b, c = make_inputs(spec, 7, "cpu"), make_inputs(spec, 7, "cpu"), make_inputs(spec, 8, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    means = [float(make_inputs(spec, s, "cpu")[0].mean()) for s in range(20)]
    assert max(abs(m) for m in means) > 0.5  # the mean moves from call to call
    assert a[1].dtype == torch.int64 and int(a[1].min()) >= 0 and int(a[1].max()) < 10


def test_statics_flag_inheritance_and_grader_imports():
    assert static_findings("class ModelNew(Model):\n    pass\n")[0].code is Reason.INHERITANCE_BYPASS
    assert static_findings("from grader.catalogue import load_catalogue\n")[0].code is Reason.SANDBOX_VIOLATION
    assert static_findings("import torch\ndef run(x):\n    return x * 2\n") == []
    assert static_findings("def run(x) return x") == []  # syntax errors are the worker's compile_error


def test_wire_roundtrip_and_sealed_tensors():
    a, b = socket.socketpair()
    tensors = [torch.randn(3, 5), torch.arange(7), torch.empty(0)]
    metas, fd = wire.tensors_to_memfd(tensors)
    wire.send_fd(a, {"op": "x", "tensors": metas}, fd)
    hdr, _ = wire.recv(b)
    got = wire.tensors_from_memfd(hdr["tensors"], wire.recv_fd(b), "cpu")
    assert all(torch.equal(x, y) for x, y in zip(got, tensors))
    r, w = os.pipe()  # an fd that is not a sealed memfd is refused
    with pytest.raises((wire.WireError, OSError)):
        wire.tensors_from_memfd(metas, r, "cpu")
    os.close(w)
    a.close()
    with pytest.raises(wire.WireError):
        wire.recv(b)


def test_timing_stats():
    xs = [float(x) for x in range(1, 101)]
    assert median(xs) == 50.5
    lo, hi = median_ci(xs)
    assert lo < 50.5 < hi and hi - lo < 25


def test_fingerprint_replays_recorded_h200_readings():
    dump = json.loads((Path(__file__).parent / "fixtures" / "nvml_h200.json").read_text())
    fp = fingerprint.collect(fingerprint.Replay(dump))
    assert fp["kind"] == "cuda" and "H200" in fp["gpu_name"]
    assert fp["mig_mode"] in ("enabled", "disabled", "unsupported")
    assert fp["driver"] and fp["max_sm_clock_mhz"] > 0
    fid = fingerprint.fingerprint_id(fp)
    moved = dict(fp, sm_clock_mhz=(fp.get("sm_clock_mhz") or 0) + 100, other_processes=[{"pid": 1}])
    assert fingerprint.fingerprint_id(moved) == fid  # clocks and co-tenants move; the target does not
    assert fingerprint.fingerprint_id(dict(fp, mig_profile="1g.18gb")) != fid
