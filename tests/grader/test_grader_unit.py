"""Unit tests of the grader's pure parts: the contract, the reward, comparison, statics, wire."""
from __future__ import annotations

import json
import math
import os
import socket
import time

import pytest
import torch

from grader import fingerprint, wire
from grader.compare import check_output_meta, compare
from grader.contract import (REWARD_FLOOR, GradeRequest, GradeResult, Reason, SizeResult, Status, clip_speedup,
                             request_from_json, reward)
from grader.inputs import make_inputs, plan_inputs
from grader.statics import static_findings
from grader.timing import median, median_ci
from tests.conftest import REPO_ROOT


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


def test_compare_takes_the_special_values_path_exactly_when_it_matters():
    """`compare` judges finite outputs without the NaN/Inf pass; every verdict, worst ratio included, is the
    one the full pass gives (its `_compare_with_specials`), and neither tensor is changed in place."""
    from grader.compare import _compare_with_specials

    g = torch.Generator().manual_seed(3)
    ref = torch.randn(40, 50, generator=g, dtype=torch.float64) * 2
    scale = ref.abs() + 0.5
    specials = ref.clone()
    specials[0, :3] = torch.tensor([torch.inf, -torch.inf, torch.nan], dtype=torch.float64)
    cases = [(ref, ref + 1e-6, {}), (ref, ref + 1e-3, {}), (ref, ref + 1e-3, {"scale": scale * 40}),
             (ref, ref * 0, {}), (ref, ref + 2e-5, {"slack": 1e-5}), (specials, specials.clone(), {}),
             (specials, ref, {}), (ref, specials, {}), (torch.zeros(4, dtype=torch.float64), torch.zeros(4), {})]
    for r, out, kw in cases:
        before = (r.clone(), out.clone())
        fast = compare(out, r, 1e-5, 1e-4, **kw)
        full = _compare_with_specials(out.double(), r, 1e-5, 1e-4, kw.get("scale"), kw.get("slack", 0.0))
        assert (fast.ok, fast.reason_code, fast.detail) == (full.ok, full.reason_code, full.detail)
        assert fast.max_rel_err == full.max_rel_err or (fast.max_rel_err != fast.max_rel_err
                                                        and full.max_rel_err != full.max_rel_err)
        for kept, now in zip(before, (r, out)):
            torch.testing.assert_close(now, kept, rtol=0, atol=0, equal_nan=True)
    assert compare(torch.zeros(4), torch.zeros(4, dtype=torch.float64), 0.0, 0.0).ok  # 0 / 0: as before, passes


def test_compare_in_pieces_on_the_host_gives_the_whole_comparisons_verdicts(monkeypatch):
    """A large float output on the host is first searched piece by piece for its worst ratio (`compare.CHUNK`): every
    verdict and worst ratio equals the whole comparison's, with the scale, the slack, a float32 reference, specials
    and failures, and a piece boundary that does not divide the output."""
    import grader.compare as cmp

    g = torch.Generator().manual_seed(5)
    ref = torch.randn(41, 53, generator=g, dtype=torch.float64) * 2
    out = (ref + torch.randn(41, 53, generator=g, dtype=torch.float64) * 1e-6).float()
    specials = ref.clone()
    specials[40, 50:] = torch.tensor([torch.inf, -torch.inf, torch.nan], dtype=torch.float64)
    worst_last = out.clone()
    worst_last[40, 52] += 1e-3
    cases = [(ref, out, {}), (ref, out, {"scale": ref.abs() + 0.5}), (ref, out, {"slack": 1e-7}),
             (ref.float(), out, {}), (ref, worst_last, {}), (ref, worst_last, {"scale": ref.abs() * 40}),
             (specials, specials.clone(), {}), (specials, ref, {}), (ref, specials, {}), (ref, ref * 0, {})]
    whole = []
    monkeypatch.setattr(cmp, "CHUNK", 1 << 30)
    for r, o, kw in cases:
        whole.append(compare(o, r, 1e-5, 1e-4, **kw))
    monkeypatch.setattr(cmp, "CHUNK", 64)
    called = []
    monkeypatch.setattr(cmp, "_worst_in_chunks", lambda *a, _f=cmp._worst_in_chunks: called.append(1) or _f(*a))
    for (r, o, kw), full in zip(cases, whole):
        pieces = compare(o, r, 1e-5, 1e-4, **kw)
        assert (pieces.ok, pieces.reason_code, pieces.detail) == (full.ok, full.reason_code, full.detail)
        assert pieces.max_rel_err == full.max_rel_err or (pieces.max_rel_err != pieces.max_rel_err
                                                          and full.max_rel_err != full.max_rel_err)
    assert len(called) == len(cases) and [v.ok for v in whole].count(True) >= 4


def test_compare_single_wrong_element_fails():
    ref = torch.randn(64, 64, dtype=torch.float64)
    out = ref.clone()
    out[63, 63] += 1.0
    assert not compare(out, ref, 1e-5, 1e-4).ok


def _chunked_cumsum_fp32(x: torch.Tensor, block: int) -> torch.Tensor:
    """An honest fp32 scan in another order: cumsum within chunks plus a running fp32 carry."""
    chunks = x.split(block, dim=-1)
    carry, outs = torch.zeros(x.shape[0], 1), []
    for c in chunks:
        outs.append(torch.cumsum(c, -1) + carry)
        carry = carry + c.sum(-1, keepdim=True)
    return torch.cat(outs, -1)


def test_scan_error_scale_passes_honest_orders_and_still_fails_downgrades(tmp_path):
    """A zero-mean prefix sum crosses zero, where |ref| says nothing of the rounding in the partial
    sums: with the card's error scale an honest chunked fp32 scan passes (it failed the |ref| bound,
    the false floor seen on the H200), while fp16 and bf16 accumulation and an off-by-one still fail."""
    from grader.catalogue import load_catalogue
    from grader.modload import load_source

    card = load_catalogue()["cumsum_fp32"]
    atol, rtol = card.tolerance()
    scale_fn = load_source(card.error_scale, "kt_scale_test", str(tmp_path)).run
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4096, generator=g) * 2.0
    ref = torch.cumsum(x.double(), -1)
    scale = scale_fn(x.double())
    honest = _chunked_cumsum_fp32(x, 256)
    assert not compare(honest, ref, atol, rtol).ok  # the |ref| bound floors an honest kernel
    assert compare(honest, ref, atol, rtol, scale).ok
    for wrong in (torch.cumsum(x.half(), -1).float(), torch.cumsum(x.bfloat16(), -1).float(),
                  torch.cumsum(x, -1) - x):
        assert not compare(wrong, ref, atol, rtol, scale).ok


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


def test_planned_inputs_are_drawn_by_fill_alone_into_the_tensors_planned():
    """`plan_inputs` (`Effort.fill_behind`): the tensors it returns are the inputs themselves, written only by
    `fill()` and in place (a worker queues that behind its closed gate, after every allocation), with
    `make_inputs`'s values; a step the input cannot take is refused when planned, before anything is drawn."""
    base = {"mean": [-1, 1], "std": [0.5, 2], "low": -2, "high": 3}
    spec = [{**base, "shape": [8, 8], "dtype": "float16", "dist": "normal", "post": ["sym", "scale:0.5:2"]},
            {**base, "shape": [5, 6], "dtype": "float32", "dist": "uniform", "post": ["softmax:-1"]},
            {**base, "shape": [6], "dtype": "int32", "dist": "randint"},
            {**base, "shape": [], "dtype": "float32", "dist": "scalar"}]
    tensors, fill = plan_inputs(spec, 11, "cpu")
    for t in tensors[:3]:
        t.zero_()
    kept = [t.data_ptr() for t in tensors[:3]]
    assert all(not t.any() for t in tensors[:3])  # nothing drawn yet
    fill()
    want = make_inputs(spec, 11, "cpu")
    assert [t.data_ptr() for t in tensors[:3]] == kept  # drawn into the planned memory
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(tensors[:3], want[:3]))
    assert tensors[3] == want[3] == -2.0 and torch.equal(tensors[0], tensors[0].T)
    with pytest.raises(ValueError, match="square"):
        plan_inputs([{**base, "shape": [4, 5], "dtype": "float32", "dist": "normal", "post": ["sym"]}], 1, "cpu")


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


def test_arena_answers_cross_once_and_its_holder_cannot_resize_it():
    """A reference worker writes every answer into the arena its parent lent it. The arena is sealed
    against resizing before it is lent (the worker cannot truncate the parent's mapping into a SIGBUS),
    an answer too big for it says so (the memfd path takes it), and metas that point outside it are
    refused before a byte is read."""
    arena = wire.Arena(1000, pin=False)
    assert arena.nbytes == 2 << 20  # whole 2 MiB pages
    a, b = socket.socketpair()
    wire.send_fd(a, {"op": "load"}, arena.fd)
    hdr, _ = wire.recv(b)
    assert hdr["_fd"] is True
    lent = wire.recv_fd(b)
    with pytest.raises(OSError):
        os.ftruncate(lent, 4096)  # what a hostile reference would try first
    view = wire.ArenaView(lent, pin=False)
    answer = [torch.randn(64, 33, dtype=torch.float64), torch.arange(5)]
    metas = view.write(answer)
    got = arena.read(metas, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(got, answer))
    view.write([torch.zeros_like(answer[0])])  # the next answer overwrites the shared pages...
    assert torch.equal(got[0], answer[0])  # ...not what the parent already read: that is its own copy
    assert view.write([torch.empty(arena.nbytes // 8 + 1, dtype=torch.float64)]) is None
    with pytest.raises(wire.WireError):
        arena.read([{**metas[0], "offset": arena.nbytes - 8}], "cpu")
    for lie in ({"shape": [1 << 40]}, {"shape": [-8, -8]}, {"dtype": "load"}):  # refused before any allocation
        with pytest.raises(wire.WireError):
            arena.read([{**metas[0], **lie}], "cpu")
    view.close()
    arena.close()
    a.close()
    b.close()


def test_timing_stats():
    xs = [float(x) for x in range(1, 101)]
    assert median(xs) == 50.5
    lo, hi = median_ci(xs)
    assert lo < 50.5 < hi and hi - lo < 25


def test_fingerprint_replays_recorded_h200_readings():
    dump = json.loads((REPO_ROOT / "tests" / "fixtures" / "nvml_h200.json").read_text())
    fp = fingerprint.collect(fingerprint.Replay(dump))
    assert fp["kind"] == "cuda" and "H200" in fp["gpu_name"]
    assert fp["mig_mode"] in ("enabled", "disabled", "unsupported")
    assert fp["driver"] and fp["max_sm_clock_mhz"] > 0
    fid = fingerprint.fingerprint_id(fp)
    moved = dict(fp, sm_clock_mhz=(fp.get("sm_clock_mhz") or 0) + 100, other_processes=[{"pid": 1}])
    assert fingerprint.fingerprint_id(moved) == fid  # clocks and co-tenants move; the target does not
    assert fingerprint.fingerprint_id(dict(fp, mig_profile="1g.18gb")) != fid


def test_off_stream_kernels_names_only_kernels_on_another_stream():
    from grader.timing import off_stream_kernels

    marker = (0.0, "fill_marker", 7)
    assert off_stream_kernels([]) == []
    assert off_stream_kernels([marker, (1.0, "softmax", 7), (2.0, "softmax", 7)]) == []
    assert off_stream_kernels([(2.0, "tail", 13), marker, (1.0, "head", 7)]) == ["tail"]  # ordered by start
    assert off_stream_kernels([marker, (1.0, "copy", None)]) == []  # an unnamed stream proves nothing
    assert off_stream_kernels([(0.0, "fill_marker", None), (1.0, "tail", 13)]) == []


@pytest.mark.gpu
def test_persisting_l2_reserved_by_a_call_is_found_and_undone():
    """The carve-out of threat 14, made here through the runtime as a cheat would, is reported once
    and reset, so the next timed call starts without it."""
    import ctypes

    torch_cuda = pytest.importorskip("torch.cuda")
    if not torch_cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.timing import DeviceClock

    clock = DeviceClock("cuda")
    if clock._l2._get is None:
        pytest.skip("the CUDA driver library is not loadable here")
    assert clock.take_persisting_l2() == 0
    props = torch.cuda.get_device_properties(0)
    want = getattr(props, "persisting_l2_cache_max_size", 0) or props.L2_cache_size // 2
    assert ctypes.CDLL("libcuda.so.1").cuCtxSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(want)) == 0
    assert clock.take_persisting_l2() > 0
    assert clock.take_persisting_l2() == 0  # undone


@pytest.mark.gpu
def test_access_policy_window_on_the_callers_stream_is_found_and_undone():
    """Threat 14 where the carve-out limit cannot be raised: the window itself asks for persisting
    lines, so a window on the caller's stream is reported and cleared."""
    import ctypes

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.timing import DeviceClock

    clock = DeviceClock("cuda")
    if clock._l2._sget is None:
        pytest.skip("the CUDA driver library is not loadable here")
    stream = torch.cuda.current_stream().cuda_stream
    assert clock.take_persisting_l2(stream) == 0
    x = torch.empty(1 << 20, device="cuda")
    value = (ctypes.c_char * 64)()
    ctypes.c_void_p.from_buffer(value, 0).value = x.data_ptr()
    ctypes.c_size_t.from_buffer(value, 8).value = 4 << 20
    ctypes.c_float.from_buffer(value, 16).value = 1.0
    ctypes.c_int.from_buffer(value, 20).value = 2  # hitProp: persisting
    lib = ctypes.CDLL("libcuda.so.1")
    assert lib.cuStreamSetAttribute(ctypes.c_void_p(stream), 1, value) == 0
    assert clock.take_persisting_l2(stream) == 4 << 20
    assert clock.take_persisting_l2(stream) == 0  # undone


def test_device_lock_times_alone_and_a_waiting_timer_stops_new_checks():
    import threading
    import time as _time

    from grader.devicelock import DeviceLock

    lock, log, lk = DeviceLock(), [], threading.Lock()

    def note(what):
        with lk:
            log.append(what)

    def checker(name, hold_s, started=None):
        with lock.shared():
            note(f"{name}+")
            if started:
                started.set()
            _time.sleep(hold_s)
            note(f"{name}-")

    def timer():
        with lock.exclusive():
            note("T+")
            _time.sleep(0.1)
            note("T-")

    first = threading.Event()
    a = threading.Thread(target=checker, args=("a", 0.3, first))
    a.start()
    first.wait()
    t = threading.Thread(target=timer)
    t.start()
    _time.sleep(0.05)  # the timer now waits for a; b arrives after it and must wait for the timer
    b = threading.Thread(target=checker, args=("b", 0.01))
    b.start()
    for th in (a, t, b):
        th.join(5)
    assert log == ["a+", "a-", "T+", "T-", "b+", "b-"], log


def test_device_lock_lets_timing_loops_interleave_by_window_but_never_beside_check_work():
    """Two loops hold the lock at once and take their windows one at a time; a check that asks while they run
    waits for both, and a loop asking after that check waits for it (batches in the order asked). With
    interleave off a loop is exclusive. `stats` splits the time among the states."""
    import threading
    import time as _time

    from grader.devicelock import DeviceLock

    lock, log, lk = DeviceLock(), [], threading.Lock()
    in_window = []

    def note(what):
        with lk:
            log.append(what)

    def loop(name, started=None):
        with lock.loop():
            note(f"{name}+")
            if started:
                started.set()
            for _ in range(5):
                with lock.window():
                    in_window.append(name)
                    assert len(in_window) == 1, in_window  # no other window meanwhile
                    _time.sleep(0.005)
                    in_window.pop()
                _time.sleep(0.005)
            note(f"{name}-")

    def checker(name):
        with lock.shared():
            note(f"{name}+")
            _time.sleep(0.02)
            note(f"{name}-")

    first = threading.Event()
    a = threading.Thread(target=loop, args=("A", first))
    a.start()
    first.wait()
    b = threading.Thread(target=loop, args=("B",))
    b.start()
    _time.sleep(0.01)
    c = threading.Thread(target=checker, args=("c",))
    c.start()
    _time.sleep(0.01)
    d = threading.Thread(target=loop, args=("D",))
    d.start()
    for th in (a, b, c, d):
        th.join(5)
    assert log.index("B+") < log.index("A-")  # the two loops overlapped
    assert log.index("c+") > max(log.index("A-"), log.index("B-"))  # the check waited for both
    assert log.index("D+") > log.index("c-")  # the later loop waited for the check
    stats = lock.stats()
    assert stats["windows"] == 15 and stats["loop_s"] > 0.05 and stats["shared_s"] >= 0.015
    assert stats["purposes"] == {}  # the checker named no purpose
    with lock.shared("verify"):
        _time.sleep(0.01)
    with lock.shared("verify"):
        pass
    n, held = lock.stats()["purposes"]["verify"]
    assert n == 2 and held >= 0.01
    n, waited = lock.stats()["purposes"]["verify: waiting for the hold"]  # nobody held it: no wait to speak of
    assert n == 2 and 0 <= waited < 0.01
    looping = threading.Event()

    def a_loop():
        with lock.loop():
            looping.set()
            _time.sleep(0.05)

    blocker = threading.Thread(target=a_loop)
    blocker.start()
    looping.wait()
    with lock.shared("verify"):  # waits for the loop's end
        pass
    blocker.join()
    n, waited = lock.stats()["purposes"]["verify: waiting for the hold"]
    assert n == 3 and waited >= 0.03, waited
    solo = DeviceLock(interleave=False)
    with solo.loop():
        assert solo._held["exclusive"] == 1


def _hammer(kinds: tuple, take, alone: tuple, threads: int, rounds: int, pause_s: float, around=None,
            beside: tuple = ()) -> tuple[int, list, dict]:
    """Threads each taking `rounds` holds of a kind drawn from `kinds` (`take(kind)`, all inside `around()` when
    given), holding each up to `pause_s`. Returns how many threads got through, every moment two kinds (or two
    holders of a kind in `alone`) held at once, but the pairs of kinds in `beside`, and the most holders of each kind
    at once."""
    import contextlib
    import random as _random
    import threading
    import time as _time

    now, most, bad, done, guard = dict.fromkeys(kinds, 0), dict.fromkeys(kinds, 0), [], [], threading.Lock()

    def worker(seed):
        rng = _random.Random(seed)
        with around() if around is not None else contextlib.nullcontext():
            for _ in range(rounds):
                kind = rng.choice(kinds)
                with take(kind):
                    with guard:
                        now[kind] += 1
                        most[kind] = max(most[kind], now[kind])
                        if any(n for k, n in now.items() if k != kind and {k, kind} not in beside) \
                                or (kind in alone and now[kind] > 1):
                            bad.append(dict(now))
                    _time.sleep(rng.random() * pause_s)
                    with guard:
                        now[kind] -= 1
        done.append(seed)

    pool = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(30)
    return len(done), bad, most


def test_device_lock_under_many_waiters_of_every_kind_admits_them_all_and_never_mixes_kinds():
    """Twelve threads asking for every kind of hold at random, many waiting at once with the same kind: all get
    through, and no hold ever overlaps one of another kind (two waiters of one kind are two places in the queue:
    H200 runs 37 and 38 stalled when taking one waiter's place out removed another's, whose ghost then blocked
    every other kind for good)."""

    from grader.devicelock import KINDS, DeviceLock

    lock = DeviceLock()
    done, bad, _ = _hammer(KINDS, lambda kind: getattr(lock, kind)(), ("exclusive",), threads=12, rounds=40,
                           pause_s=0.002)
    assert done == 12, (done, lock.state())
    assert not bad, bad[:3]
    assert lock.state() == {"held": dict.fromkeys(KINDS, 0), "waiting": [], "windows": {"draw": 0, "device": 0},
                            "windows_waiting": []}


def test_check_windows_run_beside_loops_and_their_draws_never_beside_a_device_window_or_an_exclusive_loop():
    """`DeviceLock.check` (`Effort.check_windows`): threads taking check windows, a loop's draw or device window (each
    in a loop hold of its own) and exclusive holds at random; a check window ran beside loops' draws and other
    check windows, never beside a device window or an exclusive holder, and every thread got through."""
    import contextlib

    from grader.devicelock import DeviceLock

    lock = DeviceLock()

    @contextlib.contextmanager
    def take(kind):
        if kind == "check":
            with lock.check("piece"):
                yield
        elif kind == "exclusive":
            with lock.exclusive():
                yield
        else:
            with lock.loop(), lock.window(kind):
                yield

    done, bad, most = _hammer(("check", "check", "draw", "device", "exclusive"), take, ("device", "exclusive"),
                              threads=10, rounds=50, pause_s=0.001, beside=({"check", "draw"},))
    assert done == 10 and not bad, (done, bad[:3], lock.state())
    assert most["check"] > 1  # side by side
    stats = lock.stats()
    assert stats["check_windows"] == stats["purposes"]["piece"][0] > 0 and stats["check_window_s"] > 0
    assert stats["shared_s"] == 0.0


def test_a_check_place_not_whole_holds_no_draw_but_the_ones_its_holder_takes():
    """`DeviceLock.check(whole=False)` (a gated check call, `Effort.gated_check_calls`): a place of kind `loop` and no
    draw, so a device window comes in beside it; the draws its holder takes in it count as check windows, by label."""
    import threading

    from grader.devicelock import DeviceLock

    lock = DeviceLock()
    with lock.check("gated piece", whole=False):
        got = threading.Event()

        def device_window():
            with lock.loop(), lock.window("device"):
                got.set()
        t = threading.Thread(target=device_window)
        t.start()
        assert got.wait(5.0), lock.state()  # the place alone holds no draw
        t.join()
        for part in ("drawn", "let through"):
            with lock.window("draw", stat="check", label=f"check window: call, gated, {part}"):
                pass
    stats = lock.stats()
    assert stats["check_windows"] == 2 and stats["purposes"]["gated piece"][0] == 1, stats
    assert set(stats["draws_by"]) == {"check window: call, gated, drawn", "check window: call, gated, let through"}
    with lock.check("whole piece"):  # whole, as before: its draw is held until it is given back
        assert lock.state()["windows"]["draw"] == 1


def test_draw_windows_run_beside_each_other_never_beside_a_device_window_and_take_turns_in_the_order_asked():
    """Inside the loops' hold (grader/devicelock.py): many threads taking draw and device windows at random; no
    device window ever overlaps another window of either kind, draws did overlap one another, and every thread got
    through. Then the order: a device window asked for while draws run waits for them, and a draw asked for after
    it waits for the device window; a second device window asked for after that draw goes before it
    (`device_first`), or after it in the order asked (0.14.0)."""
    import threading
    import time as _time

    from grader.devicelock import DeviceLock

    lock = DeviceLock()
    done, bad, most = _hammer(("draw", "draw", "device", "device"), lock.window, ("device",), threads=8, rounds=60,
                              pause_s=0.001, around=lock.loop)
    assert done == 8 and not bad, (done, bad[:3], lock.state())
    assert most["draw"] > 1  # draws ran side by side
    stats = lock.stats()
    assert stats["windows"] + stats["draw_windows"] == 8 * 60 and stats["window_s"] > 0 and stats["draw_window_s"] > 0

    log, lk = [], threading.Lock()

    def take(kind, name, hold, started=None):
        with lock.window(kind):
            with lk:
                log.append(f"{name}+")
            if started is not None:
                started.set()
            hold.wait(5) if isinstance(hold, threading.Event) else _time.sleep(hold)
            with lk:
                log.append(f"{name}-")

    for device_first, order in ((True, "aDEb"), (False, "aDbE")):
        lock, log = DeviceLock(device_first=device_first), []
        first, let_go = threading.Event(), threading.Event()
        runs = [threading.Thread(target=take, args=("draw", "a", let_go, first))]
        runs[0].start()
        first.wait()
        for n, (kind, name) in enumerate((("device", "D"), ("draw", "b"), ("device", "E")), 1):
            runs.append(threading.Thread(target=take, args=(kind, name, 0.01)))
            runs[-1].start()
            while len(lock.state()["windows_waiting"]) < n:  # asked, in this order (a loaded machine starts late)
                _time.sleep(0.001)
        let_go.set()
        for t in runs:
            t.join(5)
        assert log == [f"{n}{s}" for n in order for s in "+-"], (device_first, log)


def _device_window_behind(lock, draws: list, inside=lambda: None) -> None:
    """Ask `lock` for a device window on a thread of its own (running `inside` in it) while the started `draws`
    threads hold theirs; return once it has asked, and every thread has ended."""
    import threading
    import time as _time

    def device():
        with lock.window("device"):
            inside()

    timed = threading.Thread(target=device)
    timed.start()
    while not lock.state()["windows_waiting"]:
        _time.sleep(0.001)
    for t in draws + [timed]:
        t.join(5)


def test_the_lock_counts_the_wall_time_draws_hold_and_device_windows_wait_on_them():
    """`DeviceLock.stats()`: two overlapping draws count once in the wall time some draw held (against their
    holder-seconds), and a device window asked for during them counts as waiting on draws until they end; a device
    window alone counts in neither."""
    import threading
    import time as _time

    from grader.devicelock import DeviceLock

    lock = DeviceLock()
    go, held = threading.Event(), threading.Barrier(3)

    def draw(hold_s: float):
        with lock.window("draw"):
            held.wait(5)
            _time.sleep(hold_s)

    draws = [threading.Thread(target=draw, args=(s,)) for s in (0.15, 0.3)]
    for t in draws:
        t.start()
    held.wait(5)  # both draws in

    _device_window_behind(lock, draws, go.set)
    assert go.is_set()
    with lock.window("device"):
        _time.sleep(0.05)
    stats = lock.stats()
    assert 0.3 <= stats["draws_held_s"] < stats["draw_window_s"], stats  # 0.45 holder-seconds over ~0.3 s of wall
    on_draws, waiting = stats["device_waiting_on_draws_s"], stats["device_waiting_s"]
    # the hand-over: a waiting window is let in a thread wake-up after the last draw ends (ms, more on a loaded host)
    assert 0.0 < on_draws <= waiting < on_draws + 0.1 and waiting <= stats["draws_held_s"] + 0.1, stats
    assert stats["window_s"] >= 0.05 and stats["windows"] == 2, stats


def test_a_device_windows_wait_on_draws_is_charged_to_the_work_of_the_draws_held_meanwhile():
    """`DeviceLock.stats()["blocked_by"]`: while a device window waits on draws, each moment is split among the draws
    held then, by their work's label, an equal share per holder: with a fetch (0.3 s) and a check call (0.1 s) held
    as the window asks, the check call is charged about 0.05 s (half the time both held) and the fetch about 0.25 s; a
    draw held while no device window waits is charged nothing, and the shares add up to the wait on draws."""
    import threading
    import time as _time

    from grader.devicelock import DeviceLock

    lock = DeviceLock()
    with lock.window("draw", label="before"):  # nobody waits on it
        _time.sleep(0.05)
    both = threading.Barrier(3)

    def draw(label: str, hold_s: float):
        with lock.window("draw", label=label):
            both.wait(5)
            _time.sleep(hold_s)

    draws = [threading.Thread(target=draw, args=a) for a in (("fetch", 0.3), ("check call", 0.1))]
    for t in draws:
        t.start()
    both.wait(5)
    _device_window_behind(lock, draws)
    stats = lock.stats()
    blocked, on_draws = stats["blocked_by"], stats["device_waiting_on_draws_s"]
    assert set(blocked) == {"fetch", "check call"}, blocked
    assert 0.02 <= blocked["check call"] <= 0.06, blocked  # 0.05 less the device window's late start
    assert 0.15 <= blocked["fetch"] - blocked["check call"] <= 0.25, blocked  # the 0.2 s the fetch held alone
    assert abs(sum(blocked.values()) - on_draws) < 0.005, (blocked, on_draws)
    draws_by = stats["draws_by"]  # every draw by its work: count, holder-seconds
    assert {k: n for k, (n, _) in draws_by.items()} == {"before": 1, "fetch": 1, "check call": 1}, draws_by
    assert 0.28 <= draws_by["fetch"][1] < 0.5 and 0.09 <= draws_by["check call"][1] < 0.3, draws_by


def test_a_long_timing_loop_gives_way_to_waiting_check_work_and_takes_its_place_again_behind_it():
    """A loop that asks to give way every few pairs: nobody waiting, it keeps the lock (0.0); a check that asks
    meanwhile gets in before the loop ends, alone, and the loop goes on after it (H200 run 39: loops of slow
    attempts held every slot's check work off for their whole size)."""
    import threading
    import time as _time

    from grader.devicelock import DeviceLock

    for interleave in (True, False):
        lock, log, waited = DeviceLock(interleave=interleave), [], []
        started = threading.Event()

        def loop():
            with lock.loop():
                waited.append(lock.give_way("loop"))  # nobody waits yet
                started.set()
                pair, deadline = 0, _time.monotonic() + 5.0
                while "c-" not in log and _time.monotonic() < deadline:  # a loop that cannot give way runs out
                    log.append("pair")
                    _time.sleep(0.002)
                    pair += 1
                    if pair % 4 == 0:
                        waited.append(lock.give_way("loop"))
            log.append("L-")

        def check():
            with lock.shared():
                assert lock.state()["held"] == {"shared": 1, "loop": 0, "exclusive": 0}
                log.append("c+")
                _time.sleep(0.02)
                log.append("c-")

        a = threading.Thread(target=loop)
        a.start()
        started.wait()
        _time.sleep(0.01)
        c = threading.Thread(target=check)
        c.start()
        for th in (a, c):
            th.join(5)
        i = log.index("c+")
        assert log[i - 1] == "pair" and log[i + 1] == "c-" and log.index("L-") > i + 1, log
        assert waited[0] == 0.0 and max(waited) >= 0.015 and sum(w > 0 for w in waited) == 1, waited
        assert lock.stats()["gave_way"] == 1


def test_timing_stops_early_only_when_the_whole_interval_lies_below_the_clip():
    """After `clip_reps` pairs, a size whose ~95% interval lies wholly below the clip's lower end (by the margin)
    is done: its clipped speedup cannot change. One pair near the clip, a candidate above the clip, or fewer pairs
    go on; a narrow interval ends the loop only after `min_reps`. The stop needs the size's fastest check call
    beyond the clip as well (`clip_witnessed`): without it, pairs all beyond the clip go on."""
    import math as _math
    import time as _time
    from types import SimpleNamespace

    from grader.contract import SPEEDUP_CLIP
    from grader.session import CLIP_MARGIN_LOG2, Effort, _enough, beyond_clip, clip_witnessed

    low = _math.log2(SPEEDUP_CLIP[0]) - CLIP_MARGIN_LOG2
    assert beyond_clip((low - 3, low - 0.01)) and not beyond_clip((low - 3, low + 0.01))
    g = SimpleNamespace(effort=Effort(), window=None, gave_way_s=0.0, window_held_s=0.0)
    now = _time.monotonic()
    twin, slow_check, fast_check = [0.05, 0.051, 0.049], 50.0, 0.25
    assert not _enough(g, [low - 3] * 4, now, slow_check, twin)
    assert _enough(g, [low - 3] * 5, now, slow_check, twin) == "clip"  # why, for the loop's record
    # pairs let through their gates are no witness by themselves: a fast check call keeps the size timing
    assert not _enough(g, [low - 3] * 5, now, fast_check, twin)
    assert not _enough(g, [low - 3] * 4 + [low + 0.2], now, slow_check, twin)  # with five pairs: min..max
    assert not _enough(g, [6.0] * 5, now, slow_check, twin)  # far above the clip: timed in full
    least = g.effort.min_reps
    assert not _enough(g, [0.5] * (least - 1), now, fast_check, twin)
    assert _enough(g, [0.5] * least, now, fast_check, twin) == "interval"
    spread = [0.5 + 0.1 * (-1) ** k * k for k in range(20)]  # too wide for the target: a spent budget ends it
    assert not _enough(g, spread, now, fast_check, twin) and _enough(g, spread, now - 5, fast_check, twin) == "budget"
    # the witness: the fastest check call against the twin's median so far, by the same margin as the pairs
    edge = 0.05 * 2 ** -low  # the check call's ms at the margin's edge
    assert clip_witnessed(edge * 1.01, twin) and not clip_witnessed(edge * 0.99, twin)
    assert not clip_witnessed(0.25, twin)  # run 61: an honest kernel 0.25 ms at the size, its let-through pairs at 17
    assert clip_witnessed(19.5, [0.0357])  # a candidate slow by design (runs 52-53: 19.5 ms pairs), its check calls too
    assert not clip_witnessed(50.0, []) and not clip_witnessed(0.0, twin)  # no twin timed yet, no check call


def test_one_pair_ends_a_size_only_slow_clean_and_far_past_the_clip():
    """`Effort.slow_loops`: a single timed pair ends its size only when the candidate is slow at the size, this
    pair's call is slow too, neither call was let through its gate, and the candidate is 256 times slower than the
    expert (the clip's 64 by two more in log2)."""
    from grader.session import SLOW_CALL_MS, one_pair_ends_size

    twin = {"ms": 0.37}
    far = {"ms": 595.0}  # H200 run 46: a naive fp16 matmul against the expert's 0.37 ms
    assert one_pair_ends_size(True, far, twin)
    assert not one_pair_ends_size(False, far, twin)  # the check call or the warm-up call was fast
    assert not one_pair_ends_size(True, {**far, "stalled": True}, twin)  # let through: host waits timed too
    assert not one_pair_ends_size(True, far, {**twin, "stalled": True})
    assert not one_pair_ends_size(True, {"ms": 0.37 * 200}, twin)  # past the clip, not by the one-pair margin
    assert not one_pair_ends_size(True, {"ms": SLOW_CALL_MS / 2}, {"ms": 0.001})  # far past, but not a slow call
    assert one_pair_ends_size(True, {"ms": SLOW_CALL_MS}, {"ms": SLOW_CALL_MS / 1000})


def test_a_stalled_pair_ends_its_size_only_witnessed_and_past_the_clip_less_the_allowance():
    """`Effort.stalled_one_pair`: a pair let through its gates ends its size only with the witness (the switch on,
    the size's fastest check call past the clip), and the candidate's call, less `STALL_ALLOWANCE_MS` for its host's
    waits, past the one-pair bound; a twin let through lengthens only the expert's side."""
    from grader.session import STALL_ALLOWANCE_MS, one_pair_ends_size

    twin = {"ms": 0.37}
    far = {"ms": 631.8, "stalled": True}  # H200 run 80: a naive fp16 matmul, every pair let through
    assert one_pair_ends_size(True, far, twin, stalled_witnessed=True)
    assert not one_pair_ends_size(True, far, twin)  # no witness: as before
    assert not one_pair_ends_size(False, far, twin, stalled_witnessed=True)  # not slow at the size
    # 105.7 ms against 0.135: 2^-9.6 as timed, 2^-4.6 less the allowance: short of the bound (2^-8)
    assert not one_pair_ends_size(True, {"ms": 105.7, "stalled": True}, {"ms": 0.135}, stalled_witnessed=True)
    assert one_pair_ends_size(True, {"ms": 105.7}, {"ms": 0.135}, stalled_witnessed=True)  # clean: no allowance
    assert not one_pair_ends_size(True, {"ms": STALL_ALLOWANCE_MS, "stalled": True}, {"ms": 1e-6},
                                  stalled_witnessed=True)  # nothing left once the allowance is taken
    assert one_pair_ends_size(True, {"ms": 631.8}, {"ms": 0.37, "stalled": True}, stalled_witnessed=True)
    assert not one_pair_ends_size(True, {"ms": 631.8}, {"ms": 0.37, "stalled": True})


def test_a_loop_gives_way_by_the_time_it_held_the_device_not_by_its_pairs():
    """`_give_way` asks the lock to let waiters through only once the loop has held the device `give_way_s` since it
    came in or last gave way; a way given resets that clock, one that nobody took does not."""
    import time as _time
    from types import SimpleNamespace

    from grader.session import Effort, _give_way

    asked = []

    class Lock:
        def give_way(self, kind):
            asked.append(kind)
            return 0.25 if len(asked) == 2 else 0.0  # the second ask finds a waiter

    g = SimpleNamespace(effort=Effort(give_way_s=0.05), gpu_lock=Lock(), held_since=_time.monotonic(),
                        gave_way=0, gave_way_s=0.0, waited_s=0.0)
    _give_way(g, "loop")
    assert asked == []  # held for less than give_way_s
    g.held_since -= 0.06
    _give_way(g, "loop")
    assert asked == ["loop"] and g.gave_way == 0  # nobody waited: the clock runs on
    _give_way(g, "loop")
    assert len(asked) == 2 and g.gave_way == 1 and g.gave_way_s == g.waited_s == 0.25
    _give_way(g, "loop")
    assert len(asked) == 2  # the way given restarted the clock
    g.effort = Effort(give_way_s=0.0)
    g.held_since -= 10
    _give_way(g, "loop")
    assert len(asked) == 2  # 0: never


_ARMED: list = []


def _armed_clock():
    """A CUDA clock whose launch gate is armed with a page lent as the parent lends it; the page's owner. One
    per process, as a worker has: a page registered with the driver stays registered, and a second page
    mapped later at the same address is refused (H200 run 36)."""
    from grader import wire
    from grader.timing import DeviceClock

    if not _ARMED:
        clock, word = DeviceClock("cuda"), wire.GateWord()
        assert clock.gate.arm(os.dup(word.fd)) == "on", clock.gate.state
        _ARMED.extend((clock, word))
    return _ARMED[0], _ARMED[1]


@pytest.mark.gpu
def test_the_gate_times_the_kernels_not_the_hosts_launch_gaps():
    """A call that sleeps on the host between two launches: without the gate the device idles inside the
    interval for the whole sleep; behind it the two kernels run back to back."""
    import time as _time

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    clock, _word = _armed_clock()
    a = torch.randn(1 << 20, device="cuda")

    def gappy():
        b = a * 2
        _time.sleep(0.003)
        return b + 1

    open_ms = sorted(clock.time_call(gappy, ())[2] for _ in range(5))[2]
    gated_ms = sorted(clock.time_call(gappy, (), gated=True)[2] for _ in range(5))[2]
    assert open_ms > 2.5, open_ms
    assert gated_ms < 0.5, (gated_ms, open_ms)
    assert not clock.gate.stalled


@pytest.mark.gpu
def test_a_call_that_waits_for_the_device_behind_the_gate_is_let_through_by_another_process():
    """A copy to the host inside the call waits for the gate, perhaps holding the GIL: another process (the
    parent, here a child standing in for it) opens the gate through the lent page; the call completes with
    its output, and the clock says it stalled. The next call is gated again."""
    import subprocess
    import sys as _sys

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    clock, word = _armed_clock()
    a = torch.randn(1 << 20, device="cuda")
    opener = ("import mmap, struct, sys, time; m = mmap.mmap(int(sys.argv[1]), mmap.PAGESIZE); time.sleep(0.05); "
              "struct.pack_into('<I', m, 0, 1)")

    def reads_back():
        b = a * 2
        return b * (b.sum().item() != 0.5)

    child = subprocess.Popen([_sys.executable, "-c", opener, str(word.fd)], pass_fds=[word.fd])
    out = clock.time_call(reads_back, (), gated=True)[0]
    child.wait(timeout=30)
    assert torch.equal(out, a * 2)
    assert clock.gate.stalled
    clock.time_call(lambda: a * 3, (), gated=True)
    assert not clock.gate.stalled


@pytest.mark.gpu
def test_a_told_call_waits_behind_its_gate_until_the_parent_opens_it_and_its_device_time_fits_the_window():
    """The protocol of an interleaved loop (grader/devicelock.py) on the device: the clock says "drawn" (its gate is
    closed), then "queued"; the device does nothing of the call until the parent opens the gate (here 30 ms later,
    from another thread through the lent page), then the clock says "done"; the call's device interval and gap fit
    inside the parent's window from opening to "done", and a draw queued behind the gate before the call is ready
    in it."""
    import mmap
    import struct
    import threading
    import time as _time

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.worker import make_integrity_check

    clock, word = _armed_clock()
    tampered = make_integrity_check([], strict=[clock])  # the worker holds its clock so, after every call
    page = mmap.mmap(os.dup(word.fd), mmap.PAGESIZE)
    said, marks = [], {}

    def announce(stage):
        said.append(stage)
        marks[stage] = _time.perf_counter()
        if stage == "queued":
            def parent():
                _time.sleep(0.03)
                marks["open"] = _time.perf_counter()
                struct.pack_into("<I", page, 0, 1)
            threading.Thread(target=parent).start()

    for _ in range(3):
        said.clear()
        assert clock.gate.close()
        a = torch.randn(1 << 22, device="cuda")  # queued behind the gate, as a worker's draw is
        out, _, ms, host_ms, gap_ms = clock.time_call(lambda: a * 2, (), gated=True, announce=announce)
        assert said == ["drawn", "queued", "done"]  # "drawn" once the gate is closed (the caller closed it here)
        assert marks["done"] - marks["queued"] >= 0.03 and host_ms >= 30, (host_ms, marks)
        window_ms = (marks["done"] - marks["open"]) * 1e3
        assert 0 < ms + gap_ms <= window_ms + 0.05, (ms, gap_ms, window_ms)
        assert torch.equal(out, a * 2)
        assert not clock.gate.closed
        # the window's marks on the clock every process shares: the gate seen open after the parent opened it, then
        # the end event, then the synchronise, all before "done"
        seen, end, synced = (t / 1e9 for t in clock.marks_ns())
        assert marks["open"] <= seen <= end <= synced <= marks["done"], (clock.marks_ns(), marks)
        assert tampered() == []  # a call's own bookkeeping is no tampering (H200 run 60 flagged every grade so)
    clock.time_call(lambda: a * 3, ())
    assert clock.marks_ns() is None  # an untold call has no window to break down
    assert tampered() == []


@pytest.mark.gpu
def test_inputs_drawn_behind_a_closed_gate_are_queued_after_drawn_and_never_hold_the_call():
    """`Effort.fill_behind` on the device. `plan_inputs` allocates every buffer before the gate closes. The worker
    queues `fill()` as the timed call's prelude, after it has said "drawn": on the H200 (run 63) a first draw of
    fresh kernels waited for the closed gate (a kernel's first load waits for the device), which before "drawn"
    waited forever, the parent waiting for "drawn". After it, the parent's patience lets the call through. Once
    the kernels are loaded (a worker's check calls and warm-ups load them), `fill()` behind the closed gate
    allocates nothing and returns at once while the stream waits. Either way the values are `make_inputs`'s: the
    parent, the twin and the reference draw the candidate's inputs so."""
    import mmap
    import struct
    import threading
    import time as _time

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.inputs import make_inputs, plan_inputs

    clock, word = _armed_clock()
    page = mmap.mmap(os.dup(word.fd), mmap.PAGESIZE)
    base = {"mean": [-1, 1], "std": [0.5, 2], "low": -2, "high": 3}
    specs = [{**base, "shape": [256, 256], "dtype": "float16", "dist": "normal", "post": ["scale:0.5:2"]},
             {**base, "shape": [64, 64], "dtype": "float32", "dist": "uniform", "post": ["sym", "softmax:-1"]},
             {**base, "shape": [33, 33], "dtype": "bfloat16", "dist": "randint", "post": ["triu", "affine:2:-1"]},
             {**base, "shape": [1 << 20], "dtype": "int32", "dist": "randint"},
             {**base, "shape": [], "dtype": "float32", "dist": "scalar"}]

    def same(tensors, seed):
        want = make_inputs(specs, seed, "cuda")
        return tensors[-1] == want[-1] == -2.0 and all(
            a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(tensors[:-1], want[:-1]))

    # As the worker does: the draw is the timed call's prelude; the parent opens the gate on "queued", or after
    # its patience (here 2 s) when "queued" does not come.
    said = []
    let_through = threading.Event()

    def announce(stage):
        said.append(stage)
        if stage == "drawn":
            def parent():
                if not let_through.wait(2.0):
                    said.append("patience")
                struct.pack_into("<I", page, 0, 1)
            threading.Thread(target=parent).start()
        elif stage == "queued":
            let_through.set()

    tensors, fill = plan_inputs(specs, 3, "cuda")
    torch.cuda.synchronize()
    assert clock.gate.close()
    out, _, _, _, _ = clock.time_call(lambda: tensors[0] * 2, (), gated=True, announce=announce, prelude=fill)
    print(f"a first draw behind the gate (fresh kernels): {said}")  # "patience" where a load waited for the gate
    assert said[0] == "drawn" and said[-1] == "done" and "queued" in said
    assert same(tensors, 3) and torch.equal(out, tensors[0] * 2)

    tensors, fill = plan_inputs(specs, 1 << 40, "cuda")  # the kernels are loaded now
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_stats()["allocation.all.allocated"]
    assert clock.gate.close()
    rescue = threading.Timer(5.0, clock.gate.open)  # a fill that waited for the device would hang here
    rescue.start()
    t = _time.perf_counter()
    fill()
    queued_s = _time.perf_counter() - t
    behind = torch.cuda.Event()
    behind.record()
    waiting = not behind.query()
    rescue.cancel()
    clock.gate.open()
    torch.cuda.synchronize()
    assert queued_s < 1.0 and waiting, (queued_s, waiting)
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == allocated  # fill() allocated nothing
    assert same(tensors, 1 << 40)


def test_a_clocks_marks_are_written_in_place_where_the_workers_state_check_holds_every_attribute():
    from grader.timing import DeviceClock
    from grader.worker import make_integrity_check

    clock = DeviceClock("cpu")
    tampered = make_integrity_check([], strict=[clock])
    clock._note_marks(True, 1, 2, 3)
    assert clock.marks_ns() == (1, 2, 3) and tampered() == []
    clock._note_marks(False, 4, 5, 6)
    assert clock.marks_ns() is None and tampered() == []
    clock.cuda = not clock.cuda  # the check itself sees an attribute that is another object now
    assert tampered() == ["DeviceClock.cuda"]


def test_a_device_window_is_broken_down_from_the_parents_edges_and_the_workers_marks():
    """`session.window_parts`: per timed call, the parent's opening and "done" (`window_ns`) around the worker's
    marks (`marks_ns`) give four parts, whose medians over the calls make the loop's record; a reply without both
    (an untold call, a CPU reply, a malformed one) is left out."""
    from grader.session import window_parts

    rows = [{"window_ns": [0, 1_500_000], "marks_ns": [100_000, 300_000, 400_000]},
            {"window_ns": [10_000_000, 11_700_000], "marks_ns": [10_200_000, 10_400_000, 10_500_000]},
            {"window_ns": [0, 1_000_000], "marks_ns": [0, 0, 0]},
            {"window_ns": [0, 2_000_000], "marks_ns": None}, {"marks_ns": [1, 2, 3]},
            {"window_ns": [0, 1], "marks_ns": [1.5, 2, 3]}]
    assert window_parts(rows) == [0.1, 0.2, 0.1, 1.1]
    assert window_parts([{"marks_ns": None}]) is None


@pytest.mark.gpu
def test_work_left_on_a_side_stream_is_charged_to_the_call():
    """The end event on the caller's stream fires early; the device-wide done event does not."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.timing import DeviceClock

    clock = DeviceClock("cuda")
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def honest():
        return a @ a

    def hidden():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(8):
                a @ a
        return a[:1].clone()

    honest_ms, honest_gap = (sorted(x)[2] for x in zip(*(clock.time_call(honest, ())[2::2] for _ in range(5))))
    hidden_ms, hidden_gap = (sorted(x)[2] for x in zip(*(clock.time_call(hidden, ())[2::2] for _ in range(5))))
    # The end event on the caller's stream fires early; the gap to the device-wide done event holds
    # the eight hidden products, which the session charges against the expert twin's gap.
    assert hidden_gap > 4 * honest_ms + honest_gap, (honest_ms, honest_gap, hidden_ms, hidden_gap)


def test_late_work_is_charged_from_quartiles_not_from_wake_up_noise():
    """Run 2 on the H200 compared median done gaps and charged honest sizes 2-33 us: one worker's
    host woke up later than its twin's for a while. Hidden work lengthens every wait instead."""
    import random

    from grader.session import late_excess

    rng = random.Random(5)
    twin = [0.013 + rng.expovariate(1 / 0.004) for _ in range(40)]
    noisy = [0.013 + rng.expovariate(1 / 0.004) + (0.03 if rng.random() < 0.3 else 0.0) for _ in range(40)]
    assert late_excess(noisy, twin, 0.002) == 0.0
    hidden = [g + 0.05 for g in rng.sample(twin, len(twin))]  # 50 us left running after every call
    charged = late_excess(hidden, twin, 0.002)
    assert 0.035 < charged <= 0.05, charged
    assert late_excess([], twin, 0.002) == 0.0


def test_a_slot_keeps_to_the_task_it_graded_last_then_takes_a_task_nobody_grades():
    """Task affinity: a slot's kept expert and reference workers (and the answers its reference computed) serve the
    same task again while it has requests waiting. A slot that needs a new task takes the oldest of a task no other
    slot grades, one that another grades only when no other is left. Every request is handed out exactly once."""
    from grader.service import _Queue

    reqs = [GradeRequest(attempt_id=f"{t}{i}", task_id=t, source="def run(x):\n    return x\n", language="pytorch")
            for i, t in enumerate("aabcab")]
    q = _Queue(reqs)
    assert len(q) == 6
    x, y = q.take(None), q.take(None)
    assert (x.attempt_id, y.attempt_id) == ("a0", "b2")  # y passes over a1: slot x grades a
    assert q.take("b").attempt_id == "b5"  # y keeps to b
    assert q.take("b").attempt_id == "c3"  # a is still x's
    assert [q.take("a").attempt_id, q.take("a").attempt_id] == ["a1", "a4"]
    assert q.take("a") is None and q.take("c") is None and len(q) == 0

    q = _Queue([r for r in reqs if r.task_id != "c"][:3])  # a0 a1 b2, three slots
    assert [q.take(None).attempt_id for _ in range(3)] == ["a0", "b2", "a1"]  # every task left is graded: the oldest
    assert q.take(None) is None

    # without affinity, a slot done with a task leaves it to whoever comes next: it is nobody's any more
    q = _Queue([GradeRequest(attempt_id=f"{t}{i}", task_id=t, source="def run(x):\n    return x\n",
                             language="pytorch") for i, t in enumerate("abac")], affinity=False)
    assert [q.take(None).attempt_id, q.take(None).attempt_id, q.take("a").attempt_id] == ["a0", "b1", "a2"]


def test_the_queue_says_whether_a_task_has_a_request_waiting_queued_or_held():
    """`GraderService(answers_for_waiting=True)` copies a computed answer into the pool only while another request of
    its task waits: queued, or held for its build ahead."""
    from grader.service import _Queue

    reqs = [GradeRequest(attempt_id=f"{t}{i}", task_id=t, source="def run(x):\n    return x\n", language="pytorch")
            for i, t in enumerate("aabc")]
    q = _Queue(reqs, held={id(reqs[3])})
    assert q.waiting("a") and q.waiting("b") and q.waiting("c") and not q.waiting("z")
    assert q.take(None).attempt_id == "a0" and q.waiting("a")
    assert q.take("a").attempt_id == "a1" and not q.waiting("a")  # a's last is being graded: none waits
    assert q.take("a").attempt_id == "b2" and not q.waiting("b")
    assert q.waiting("c")  # held, not queued
    q.release(reqs[3])
    assert q.waiting("c") and q.take("b").attempt_id == "c3" and not q.waiting("c")


def test_requests_that_build_a_cuda_extension_are_handed_out_first():
    """A CUDA request's build takes tens of seconds of CPU: started first, it overlaps the other grades instead of
    ending the round. Within each kind, the arrival order and the task affinity stay."""
    from grader.service import _Queue

    kinds = {"p": "pytorch", "t": "triton", "c": "cuda"}
    reqs = [GradeRequest(attempt_id=f"{k}{i}", task_id=t, source="def run(x):\n    return x\n", language=kinds[k])
            for i, (k, t) in enumerate(zip("pcptcc", "abcdbe"))]
    q = _Queue(reqs)
    got, last = [], None
    while (r := q.take(last)) is not None:  # one slot
        got.append(r.attempt_id)
        last = r.task_id
    assert got == ["c1", "c4", "c5", "p0", "p2", "t3"], got
    q = _Queue(reqs)
    assert q.take(None).attempt_id == "c1" and q.take("b").attempt_id == "c4"  # b's cuda request, then ...
    assert q.take("b").attempt_id == "c5"  # ... b has none left: the next CUDA request


def test_a_request_built_ahead_waits_outside_the_queue_until_released_then_goes_first():
    """grader.buildahead: a held request is handed to no slot while its build runs; a slot that finds nothing else
    waits for it (instead of ending), and once released it is the next handed out. When nothing is queued or held, a
    waiting slot ends."""
    import threading
    import time as _time

    from grader.buildahead import wants_build
    from grader.service import _Queue

    reqs = [GradeRequest(attempt_id=f"r{i}", task_id=t, source="def run(x):\n    return x\n", language="pytorch")
            for i, t in enumerate("abc")]
    q = _Queue(reqs, held={id(reqs[1])})
    assert len(q) == 3 and q.take(None).attempt_id == "r0" and q.take("a").attempt_id == "r2"
    got, ended = [], []

    def slot():
        r = q.take("c")
        got.append(r)
        if r is not None:
            ended.append(q.take(r.task_id))

    waiters = [threading.Thread(target=slot) for _ in range(3)]
    for t in waiters:
        t.start()
    _time.sleep(0.2)
    assert got == [] and all(t.is_alive() for t in waiters)  # held: nobody ends while it may come
    q.release(reqs[1])
    for t in waiters:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in waiters)
    assert sorted(got, key=lambda r: r is not None)[:2] == [None, None] and got.count(None) == 2
    assert [r.attempt_id for r in got if r is not None] == ["r1"] and ended == [None]
    assert len(q) == 0

    # which modules are built ahead: those naming torch's loaders, and CUDA ones only where a device grades them
    ext = "from torch.utils.cpp_extension import load_inline\n_m = load_inline(name='m', cpp_sources='')\n"
    assert wants_build(ext, "pytorch", "cpu") and wants_build(ext, "cuda", "cuda:0")
    assert not wants_build(ext, "cuda", "cpu") and not wants_build("def run(x):\n    return x\n", "cuda", "cuda")


class _ReplayNVML:
    """NVML as grader.devicewatch calls it, answering from a script of readings (the shape pynvml gives)."""

    NVML_CLOCK_SM = 1

    class NVMLError(Exception):
        pass

    def __init__(self, clocks, reasons, samples):
        self.clocks, self.reasons, self.samples = list(clocks), list(reasons), samples

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"gpu{index}"

    def nvmlDeviceGetClockInfo(self, handle, kind):
        assert kind == self.NVML_CLOCK_SM
        return self.clocks.pop(0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.reasons.pop(0)

    def nvmlDeviceGetProcessUtilization(self, handle, since_us):
        got = [s for s in self.samples if s.timeStamp >= since_us]
        if not got:
            raise self.NVMLError("Not Found")
        return got

    memory = None
    """(total, free, {pid: used bytes}) for `DeviceWatch.memory`; None: the reading fails."""

    def nvmlDeviceGetMemoryInfo(self, handle):
        from types import SimpleNamespace as S

        if self.memory is None:
            raise self.NVMLError("Unknown Error")
        total, free, _ = self.memory
        return S(total=total, free=free, used=total - free)

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        from types import SimpleNamespace as S

        return [S(pid=pid, usedGpuMemory=used) for pid, used in self.memory[2].items()]


def test_device_watch_names_every_other_process_on_the_device_during_a_timing_loop():
    """While a slot times alone, any other process sampled on the SMs or memory is reported by its role
    (or as not ours); the timed pair, stale samples and idle ones are not; the clocks at both ends and
    the clock-event reasons of either end are kept."""
    from types import SimpleNamespace as S

    from grader.devicewatch import DeviceWatch

    t0 = 1_000.0
    samples = [S(pid=10, timeStamp=int(t0 * 1e6) + 5, smUtil=90, memUtil=60),   # the candidate: timed
               S(pid=12, timeStamp=int(t0 * 1e6) + 9, smUtil=40, memUtil=10),   # another slot's worker
               S(pid=12, timeStamp=int(t0 * 1e6) + 20, smUtil=25, memUtil=30),
               S(pid=99, timeStamp=int(t0 * 1e6) + 7, smUtil=0, memUtil=5),     # not a process of ours
               S(pid=13, timeStamp=int(t0 * 1e6) + 8, smUtil=0, memUtil=0),     # idle: not reported
               S(pid=14, timeStamp=int(t0 * 1e6) - 1, smUtil=70, memUtil=0)]    # before the loop
    nvml = _ReplayNVML(clocks=[1980, 1410], reasons=[0x0, 0x4 | 0x1], samples=samples)
    watch = DeviceWatch(nvml, clock=lambda: t0)
    mark = watch.mark()
    seen = watch.since(mark, {10: "candidate timed", 11: "twin timed", 12: "slot 2 expert", 1: "parent"})
    assert seen["sm_mhz"] == [1980, 1410]
    assert seen["reasons"] == ["gpu_idle", "sw_power_cap"]
    assert seen["others"] == [{"pid": 12, "role": "slot 2 expert", "sm_pct": 40, "mem_pct": 30, "samples": 2},
                              {"pid": 99, "role": "not ours", "sm_pct": 0, "mem_pct": 5, "samples": 1}]
    assert "error" not in seen
    quiet = _ReplayNVML(clocks=[1980, 1980], reasons=[0, 0], samples=[])  # no sample in the window at all
    w2 = DeviceWatch(quiet, clock=lambda: t0)
    assert w2.since(w2.mark(), {}) == {"sm_mhz": [1980, 1980], "reasons": [], "others": []}


def test_device_watch_reads_the_memory_every_process_uses_in_one_read():
    """`DeviceWatch.used` (the acceptance samples it twice a second) on readings as H200 run 65 gave them as it
    ended: 89.1 GiB of 140.4 in use; None when the reading fails."""
    from grader.devicewatch import DeviceWatch

    nvml = _ReplayNVML(clocks=[], reasons=[], samples=[])
    total = int(140.4 * 2**30)
    nvml.memory = (total, total - int(89.1 * 2**30), {})
    watch = DeviceWatch(nvml)
    assert watch.used() == int(89.1 * 2**30)
    nvml.memory = None
    assert watch.used() is None


def test_device_watch_sums_the_memory_each_kind_of_process_holds():
    """`DeviceWatch.memory_by_role` (the acceptance's per-kind breakdown of the device's memory): processes summed by
    their role's last word, those the service does not name as "not ours", a process NVML gives no figure for left
    out; None when the reading fails."""
    from grader.devicewatch import DeviceWatch

    gib = 2**30
    nvml = _ReplayNVML(clocks=[], reasons=[], samples=[])
    nvml.memory = (140 * gib, 10 * gib, {1: 11 * gib, 2: 4 * gib, 3: 5 * gib, 4: 3 * gib, 5: 1 * gib, 6: None,
                                          7: 2 * gib})
    roles = {1: "parent", 2: "slot 0 candidate", 3: "slot 1 candidate", 4: "slot 0 expert", 5: "slot 3 spare",
             6: "slot 2 reference"}
    watch = DeviceWatch(nvml)
    assert watch.memory_by_role(roles) == {"used": 130 * gib, "parent": 11 * gib, "candidate": 9 * gib,
                                           "expert": 3 * gib, "spare": 1 * gib, "not ours": 2 * gib}
    nvml.memory = None
    assert watch.memory_by_role(roles) is None


def test_an_out_of_memory_error_on_a_device_other_slots_filled_is_the_graders_failure_not_the_attempts():
    """`session.oom_floor` on NVML readings as H200 run 56 gave them (139.8 GiB, 39 MiB free, 16 slots; three honest
    kernels held about 4 GiB each when they ran out): the device full and the candidate under its share, infra_error
    (graded again); over its share, or on a device with room (a candidate can raise the error itself), or with no
    reading of it, the attempt's own runtime_error."""
    from grader.contract import Reason, Status
    from grader.devicewatch import DeviceWatch
    from grader.session import oom_floor

    gib = 2**30
    nvml = _ReplayNVML(clocks=[], reasons=[], samples=[])
    watch = DeviceWatch(nvml)
    total = int(139.8 * gib)
    cases = [((total, 39 << 20, {10: 4 * gib, 11: 30 * gib}), 10, Status.INFRA_ERROR),   # full, 4 of 8.7 GiB
             ((total, 39 << 20, {10: 4 * gib, 11: 30 * gib}), 11, Status.RUNTIME_ERROR),  # full, over its share
             ((total, 39 << 20, {11: 30 * gib}), 10, Status.RUNTIME_ERROR),             # full, its pid unseen
             ((total, 60 * gib, {10: 4 * gib}), 10, Status.RUNTIME_ERROR),              # room left: its own error
             (None, 10, Status.RUNTIME_ERROR)]                                          # no reading
    for memory, pid, status in cases:
        nvml.memory = memory
        reading = watch.memory(pid)
        assert (reading is None) is (memory is None)
        floor = oom_floor(reading, 16, "OutOfMemoryError: CUDA out of memory.")
        assert floor.status is status and floor.code is Reason.OOM, (memory, pid, floor.reason)
        assert floor.reason.endswith("OutOfMemoryError: CUDA out of memory."), floor.reason
    assert oom_floor(None, 16, "x").reason == "x"


def _wait_for(cond, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "the watch's sampling thread kept no reading in time"
        time.sleep(0.005)


def test_an_out_of_memory_error_is_judged_on_the_watchs_full_readings_before_it_came_back():
    """H100 run 100 (8 slots on 79.6 GiB): two honest kernels ran out of memory holding 1-2 GiB on a full device and
    were floored runtime_error, while seven others of the same runs were judged the device's; one NVML reading just
    after the reply can come after another process gave memory back. The watch's own sampling (`DeviceWatch.sample`)
    keeps the device's full readings, and `session._oom` weighs those of the last `OOM_EVIDENCE_S` too: the device
    full with the candidate under its share, infra_error, even where the reading after finds room. Over its share in
    the full reading (it filled the device itself, then gave memory back), unseen in it, or a full reading older than
    the window: the attempt's own runtime_error."""
    from types import SimpleNamespace as S

    from grader.contract import Reason, Status
    from grader.devicewatch import DeviceWatch
    from grader.session import OOM_EVIDENCE_S, _oom

    gib = 2**30
    total, cand, ref = int(79.6 * gib), 10, 11
    full = (total, 20 << 20, {cand: int(1.3 * gib), ref: 40 * gib})
    after = (total, 6 * gib, {cand: int(1.3 * gib)})  # the reference's worker ended between error and reading
    nvml = _ReplayNVML(clocks=[], reasons=[], samples=[])
    lists = []
    real_list = nvml.nvmlDeviceGetComputeRunningProcesses
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: lists.append(1) or real_list(h)

    def grade(watch, pid=cand):
        return S(watch=watch, conn=S(pid=pid), slot=S(slots=8))

    # no sampling: the one reading after finds room, and the grade is the attempt's fault (as 0.19.2 judged it)
    nvml.memory = after
    watch = DeviceWatch(nvml)
    assert _oom(grade(watch), "OutOfMemoryError").status is Status.RUNTIME_ERROR
    # sampling: a process list is read only for a full reading
    watch.sample(0.005)
    _wait_for(lambda: watch.sampled >= 3)
    assert not lists[1:], "the process list was read while the device had room"
    nvml.memory = full
    _wait_for(lambda: watch.full_readings() >= 1)
    nvml.memory = after
    floor = _oom(grade(watch), "OutOfMemoryError: CUDA out of memory.")
    assert floor.status is Status.INFRA_ERROR and floor.code is Reason.OOM, floor.reason
    assert "s before its error came back" in floor.reason and "1.30 GiB" in floor.reason, floor.reason
    assert floor.reason.endswith("OutOfMemoryError: CUDA out of memory."), floor.reason
    # the reference's pid held 40 GiB, over its share of 9.95: had it been the one erring, its own fault
    assert _oom(grade(watch, ref), "x").status is Status.RUNTIME_ERROR
    # a pid the full reading did not list: its own fault
    assert _oom(grade(watch, 12), "x").status is Status.RUNTIME_ERROR
    # the readings age out of the window
    assert watch.full_since(OOM_EVIDENCE_S, cand) and not watch.full_since(0.0, cand)
    watch.close()
    assert not watch._sampler.is_alive()
    # a candidate that filled the device itself and gave its memory back: over its share when it was full
    nvml.memory = (total, 20 << 20, {cand: 60 * gib})
    selfish = DeviceWatch(nvml)
    selfish.sample(0.005)
    _wait_for(lambda: selfish.full_readings() >= 1)
    nvml.memory = (total, 70 * gib, {cand: 1 * gib})
    assert _oom(grade(selfish), "x").status is Status.RUNTIME_ERROR
    selfish.close()


def test_a_kept_worker_keeps_its_memory_at_a_new_size_only_while_the_device_has_room():
    """`Effort.keep_size_memory` (`session._room_to_keep`) on recorded NVML readings: under `KEEP_MEMORY_BELOW` of
    the device in use a kept worker keeps its cached memory as it moves to another size; at or over it, with no
    reading, or with the part off, it gives it back as before."""
    import dataclasses
    from types import SimpleNamespace as S

    from grader.devicewatch import DeviceWatch
    from grader.session import KEEP_MEMORY_BELOW, Effort, _room_to_keep

    gib = 2**30
    total = int(79.6 * gib)
    nvml = _ReplayNVML(clocks=[], reasons=[], samples=[])
    watch = DeviceWatch(nvml)
    on = dataclasses.replace(Effort(), keep_size_memory=True)
    grade = S(effort=on, watch=watch)
    for used, keeps in ((43.5, True), (KEEP_MEMORY_BELOW * 79.6 - 0.1, True), (KEEP_MEMORY_BELOW * 79.6, False),
                        (73.8, False)):
        nvml.memory = (total, total - int(used * gib), {})
        assert _room_to_keep(grade) is keeps, used
        assert watch.share_used() == pytest.approx(used / 79.6, abs=1e-6)
    nvml.memory = None  # the reading fails
    assert _room_to_keep(grade) is False
    nvml.memory = (total, total - 10 * gib, {})
    assert _room_to_keep(S(effort=Effort(), watch=watch)) is True  # on by default since grader 0.23.0
    assert _room_to_keep(S(effort=dataclasses.replace(on, keep_size_memory=False), watch=watch)) is False  # off
    assert _room_to_keep(S(effort=on, watch=None)) is False  # no NVML
    watch.close()


def _real_watch():
    """The device watch on this machine's NVML (skips without a CUDA device or NVML)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.devicewatch import DeviceWatch

    watch = DeviceWatch.local(True)
    if watch is None:
        pytest.skip("no NVML here")
    return watch


@pytest.mark.gpu
def test_gpu_nvml_reads_the_device_memory_a_process_holds():
    """`DeviceWatch.memory` on the real NVML (`oom_floor`'s evidence): this process, holding 256 MiB more on the
    device, is listed under its own pid with at least that much, and the device's total and free memory are read.
    A pid NVML does not list is None, never 0."""
    watch = _real_watch()
    try:
        held = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        got = watch.memory(os.getpid())
        assert got is not None and got["total"] >= got["free"] > 0, got
        assert got["pid_used"] is not None and got["pid_used"] >= held.numel(), got
        assert watch.memory(2**22 + 7)["pid_used"] is None  # above any pid this kernel hands out
    finally:
        watch.close()


@pytest.mark.gpu
def test_gpu_the_watch_samples_the_device_memory_on_its_own_thread_until_closed():
    """`DeviceWatch.sample` on the real NVML (`memory_watch`): readings come every interval while the watch is open,
    and the thread ends with `close`."""
    watch = _real_watch()
    try:
        watch.sample(0.01)
        _wait_for(lambda: watch.sampled >= 5)
        assert watch._sampler.is_alive()
    finally:
        watch.close()
    assert not watch._sampler.is_alive()


def test_declared_cuda_kernels_and_whether_one_ran():
    """A cuda candidate's profiled call must run one of the kernels its source declares: a CUDA graph of
    library kernels passes the aten-op rule (H200 run 24, CUDA-L1 L3:T28, graded correct at 3.9x)."""
    from grader.statics import declared_kernels, ran_own_kernel

    source = '''
cuda_src = r"""
template <typename T> __global__ void __launch_bounds__(256) scale_kernel(const T* x, T* y) { }
extern "C" __global__ void row_sum(const float* x, float* y, int n) { }
__global__
void split_decl_kernel(float* y) { }
"""
'''
    assert declared_kernels(source) == ["row_sum", "scale_kernel", "split_decl_kernel"]
    assert declared_kernels("import torch\ndef run(x):\n    return x * 2\n") == []
    seen = ["void scale_kernel<float>(float const*, float*)", "Memcpy DtoD (Device -> Device)"]
    assert ran_own_kernel(declared_kernels(source), seen)
    assert ran_own_kernel(["row_sum"], ["row_sum(float const*, float*, int)"])
    library = ["sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x64x8",
               "void at::native::vectorized_elementwise_kernel"]
    assert not ran_own_kernel(["row_sum", "scale_kernel"], library)
    assert not ran_own_kernel(["sum"], ["row_sum(float const*, float*, int)"])  # whole identifiers only
    assert ran_own_kernel([], library)  # nothing declared (a CUTLASS template, a library call): not judged here


def test_a_workers_start_failure_is_named_by_its_exception_line_not_the_advice_after_it():
    """H100 run 101: every expert worker that failed to start on a full device was reported as "Compile with
    `TORCH_USE_CUDA_DSA` to enable device-side assertions.", the last line of a CUDA error's text. The line that
    names the error comes first now (`launcher.error_line`); text with no exception's name gives its last line."""
    from grader.launcher import error_line

    cuda = ("Traceback (most recent call last):\n  File \"zygote.py\", line 10, in boot\n    torch.cuda.init()\n"
            "torch.AcceleratorError: CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported "
            "at some other API call.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    assert error_line(cuda) == "torch.AcceleratorError: CUDA error: out of memory"
    # the worker's own format (`worker.format_error`): the error first, then its frames, indented
    assert error_line("OutOfMemoryError: CUDA out of memory.\n  File 'ref.py', line 3, in run") == \
        "OutOfMemoryError: CUDA out of memory."
    assert error_line("no exception here\nstill none") == "still none"
    assert error_line("") == "no detail"


def test_only_a_reference_written_here_answers_through_its_gate():
    """`Effort.gated_reference`: a gated reference runs its Python in no window, so only a reference the catalogue
    wrote (`SealedTask.ours`) answers through its gate; a corpus reference (an imported card, even one whose expert
    is its reference) keeps its whole answer inside its window. The rest of the conditions hold in both."""
    import dataclasses
    from types import SimpleNamespace

    from grader.catalogue import load_catalogue
    from grader.session import Effort, SealedTask, _gates_answer

    card = load_catalogue()["gelu_fp32"]
    conn = SimpleNamespace(gate=object(), arena=SimpleNamespace(pinned=True), answered="M=1", gate_stalled=False)
    size = SimpleNamespace(given=False, key="M=1")
    for task, gated in ((SealedTask(card, "cuda"), True),
                        (SealedTask(dataclasses.replace(card, task_id="imported_gelu", expert=card.reference), "cuda"),
                         False),
                        (SealedTask(dataclasses.replace(card, reference=card.reference + "\n"), "cuda"), False)):
        g = SimpleNamespace(effort=Effort(gated_reference=True), cuda=True, task=task)
        assert _gates_answer(g, conn, size) is gated, task.card.task_id
        assert _gates_answer(SimpleNamespace(effort=Effort(), cuda=True, task=task), conn, size) is gated  # default
        assert not _gates_answer(SimpleNamespace(effort=Effort(gated_reference=False), cuda=True, task=task), conn,
                                 size)  # off
