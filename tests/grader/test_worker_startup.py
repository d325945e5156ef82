"""Worker start-up faults that only a CUDA build showed, each reproduced on CPU.

On an H200 every grade failed while CPU CI was green:
1. the zygote's pre-import queried CUDA (torch.utils.cpp_extension calls torch.cuda.is_available()
   at import on a CUDA build), so every forked worker died: "Cannot re-initialize CUDA in forked
   subprocess". A CPU wheel never reaches the driver, so these tests make the query itself fail:
   under the zygote's CudaQueryGuard every CUDA query raises.
2. a worker cached the bytecode of a lazily imported module in site-packages (a write outside its
   scratch directory, floored by the audit hook);
3. tempfile's directory, computed in the zygote before the fork, sent the worker's temporary files
   to /tmp instead of its scratch (TemporaryFile opens /tmp itself: floored);
4. a worker that died before its hello reached the parent as "channel closed by peer", its
   traceback lost in its scratch log.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from grader import zygote
from grader.contract import GradeRequest, Reason, Status
from grader.service import GraderService
from grader.zygote import CudaQueryGuard, CudaTouchedInZygote
from tests.conftest import REPO_ROOT
from tests.grader.sources import HONEST_SOFTMAX

TASK = "softmax_rows_fp32"
HONEST = HONEST_SOFTMAX
SOFTMAX = HONEST.split("def run(x):\n", 1)[1]


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (the zygote's situation: nothing imported yet)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, cwd=REPO_ROOT, env={**os.environ, "TRITON_INTERPRET": "1", **env})


# ---- 1. the zygote's pre-import never queries CUDA ----------------------------------------------

QUERIES = {
    "torch.cuda.is_available": lambda: torch.cuda.is_available(),
    "torch.cuda.device_count": lambda: torch.cuda.device_count(),
    "torch.cuda.init": lambda: torch.cuda.init(),
    "torch.cuda._lazy_init": lambda: torch.cuda._lazy_init(),
    "torch.cuda.current_device": lambda: torch.cuda.current_device(),
    "torch.cuda.set_device": lambda: torch.cuda.set_device(0),
    "torch.cuda.get_device_properties": lambda: torch.cuda.get_device_properties(0),
    "torch.cuda.get_device_name": lambda: torch.cuda.get_device_name(0),
    "torch.cuda.get_device_capability": lambda: torch.cuda.get_device_capability(0),
    "torch.cuda.synchronize": lambda: torch.cuda.synchronize(),
    "torch.cuda.mem_get_info": lambda: torch.cuda.mem_get_info(),
    "torch.cuda.current_stream": lambda: torch.cuda.current_stream(),
    "torch.cuda._device_count_nvml": lambda: torch.cuda._device_count_nvml(),
    "torch.cuda.get_arch_list": lambda: torch.cuda.get_arch_list(),
    "torch.accelerator.device_count": lambda: torch.accelerator.device_count(),
    "torch.accelerator.current_device_index": lambda: torch.accelerator.current_device_index(),
    "torch.accelerator.get_device_capability": lambda: torch.accelerator.get_device_capability(0),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_guard_refuses_every_cuda_query(name):
    with pytest.raises(CudaTouchedInZygote, match=name.replace(".", r"\.")):
        with CudaQueryGuard():
            QUERIES[name]()


def test_guard_fails_a_query_whose_error_was_swallowed():
    """A library that catches the refusal may cache "no CUDA" in the zygote: still a failure."""
    swallowed = r"torch\.cuda\.is_available\(\) from .*test_worker_startup"
    with pytest.raises(CudaTouchedInZygote, match=swallowed):
        with CudaQueryGuard():
            try:
                torch.cuda.is_available()
            except Exception:  # noqa: BLE001 - what a careless library does
                pass


def test_guard_restores_everything_including_bindings_made_while_it_ran():
    """Modules imported under the guard bind the guarded functions (torch._dynamo's CudaInterface
    holds staticmethod(torch.cuda.current_device)): after the guard those must be the real ones."""
    before = {n: getattr(torch.cuda, n).__code__ for n in zygote.CUDA_QUERIES["torch.cuda"]
              if hasattr(getattr(torch.cuda, n, None), "__code__")}
    with CudaQueryGuard():
        class Interface:
            device_count = staticmethod(torch.cuda.device_count)
            is_available = staticmethod(torch.cuda.is_available)
        from torch.cuda import get_arch_list
    assert {n: getattr(torch.cuda, n).__code__ for n in before} == before
    assert Interface.device_count() == torch.cuda.device_count()
    assert Interface.is_available() == torch.cuda.is_available()
    assert get_arch_list() == torch.cuda.get_arch_list()


def test_guard_covers_functions_with_closures(monkeypatch):
    """A function's code can only be swapped for code with as many free variables."""
    import functools
    import types

    fake = types.ModuleType("kt_fake_cuda")

    def make():
        count = 3

        def device_count():
            return count
        return device_count

    fake.device_count = make()
    fake.cached = functools.lru_cache(make())
    monkeypatch.setitem(sys.modules, "kt_fake_cuda", fake)
    monkeypatch.setitem(zygote.CUDA_QUERIES, "kt_fake_cuda", ("device_count", "cached"))
    for fn in (fake.device_count, fake.cached):
        with pytest.raises(CudaTouchedInZygote, match="kt_fake_cuda"):
            with CudaQueryGuard():
                fn()
    assert fake.device_count() == 3 and fake.cached() == 3


def test_preimport_refuses_a_module_that_queries_cuda(tmp_path, monkeypatch):
    (tmp_path / "kt_queries_cuda.py").write_text("import torch\nN = torch.cuda.device_count()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(zygote, "PREIMPORTS", ("kt_queries_cuda",) + zygote.PREIMPORTS)
    try:
        with pytest.raises(CudaTouchedInZygote, match=r"torch\.cuda\.device_count"):
            zygote._preimport("cpu")
    finally:
        sys.modules.pop("kt_queries_cuda", None)


def test_cpp_extension_import_queries_cuda_on_a_cuda_build(tmp_path):
    """Root cause 1, replayed on a CPU wheel dressed as a CUDA build: importing
    torch.utils.cpp_extension calls torch.cuda.is_available() (finding CUDA_HOME), so it must
    never be pre-imported, and the guard says so if it ever is."""
    out = _python("""
        import torch
        from grader.zygote import CudaQueryGuard, CudaTouchedInZygote
        torch.cuda._is_compiled = lambda: True
        torch.version.cuda = "12.8"
        try:
            with CudaQueryGuard():
                import torch.utils.cpp_extension
        except CudaTouchedInZygote as e:
            print("REFUSED", e)
        """, CUDA_HOME=str(tmp_path))
    assert "REFUSED torch.cuda.is_available()" in out.stdout, out.stdout + out.stderr
    assert "torch.utils.cpp_extension" not in zygote.PREIMPORTS + zygote.OPTIONAL_PREIMPORTS


def test_real_preimport_passes_the_guard_and_forks_clean():
    out = _python("""
        import sys, torch
        from grader import zygote
        codes = {n: f.__code__ for n, f in vars(torch.cuda).items() if callable(f) and hasattr(f, "__code__")}
        zygote._preimport("cpu")
        zygote.check_fork_safe()
        assert "torch.utils.cpp_extension" not in sys.modules, "pre-imported: it queries CUDA on a CUDA build"
        assert not torch.cuda.is_initialized()
        assert {n: f.__code__ for n, f in vars(torch.cuda).items() if n in codes} == codes, "not restored"
        import torch.utils.cpp_extension  # what the worker does after the fork, for its extension hook
        print("CLEAN")
        """)
    assert "CLEAN" in out.stdout, out.stdout + out.stderr


def test_fork_probe_detects_cuda_initialised_in_the_zygote(monkeypatch):
    """A direct torch._C call is not guarded; the forked child's bad-fork mark still shows it."""
    zygote.check_fork_safe()
    monkeypatch.setattr(torch.cuda, "_is_in_bad_fork", lambda: True)
    with pytest.raises(CudaTouchedInZygote, match="bad fork"):
        zygote.check_fork_safe()


# ---- 2-4. through the real sandboxed workers ----------------------------------------------------

@pytest.fixture(scope="module")
def service():
    with GraderService(mode="zygote", workers=1) as svc:
        yield svc


def _grade(svc: GraderService, name: str, source: str):
    return svc.grade_one(GradeRequest(attempt_id=name, task_id=TASK, source=source, language="pytorch"))


def test_worker_never_writes_bytecode(service):
    r = _grade(service, "flag", "import sys\nassert sys.dont_write_bytecode, 'this worker caches bytecode'\n"
               + HONEST)
    assert r.status is Status.CORRECT, r.reason


def test_worker_keeps_scaled_dot_product_attention_off_cudnn(service):
    """Each call runs on a thread of its own, and cuDNN's attention builds its graphs per thread: every call of
    an SDPA expert built its graph again, timed as the call (H200 run 39: 21-45 ms per attention call). The
    worker turns that backend off before any task or candidate code runs."""
    r = _grade(service, "sdpa", "import torch\nassert not torch.backends.cuda.cudnn_sdp_enabled(), "
               "'cuDNN attention is on in the worker'\n" + HONEST)
    assert r.status is Status.CORRECT, r.reason


def test_lazily_imported_module_without_bytecode_is_no_violation(service):
    """A module imported for the first time in the worker (no bytecode cached yet, as Triton's
    code generator was on the GPU host): importing it writes nothing, so nothing is floored."""
    site = Path(sysconfig.get_paths()["purelib"])
    name = f"kt_lazy_{uuid.uuid4().hex[:8]}"
    pkg = site / name
    try:
        (pkg / "__pycache__").mkdir(parents=True)
    except OSError as e:
        pytest.skip(f"cannot plant a module in site-packages here: {e}")
    try:
        (pkg / "__init__.py").write_text("SCALE = 1.0\n")
        r = _grade(service, "lazy", f"import {name}\n" + HONEST)
        assert r.status is Status.CORRECT, r.reason
        assert list((pkg / "__pycache__").iterdir()) == []
    finally:
        import shutil

        shutil.rmtree(pkg, ignore_errors=True)


TEMPFILES = """import os, tempfile
SCRATCH = os.getcwd()


def _use_temp_files():
    assert tempfile.gettempdir() == SCRATCH, f"temporary files go to {tempfile.gettempdir()}, not {SCRATCH}"
    with tempfile.TemporaryFile() as f:  # O_TMPFILE: opens the temporary directory itself
        f.write(b"x")
    with tempfile.NamedTemporaryFile() as f:
        assert os.path.dirname(f.name) == SCRATCH
    fd, path = tempfile.mkstemp()
    os.close(fd)
    os.unlink(path)
    assert os.path.dirname(path) == SCRATCH
    d = tempfile.mkdtemp()
    os.rmdir(d)
    assert os.path.dirname(d) == SCRATCH


_use_temp_files()


def run(x):
    _use_temp_files()
"""


def test_temporary_files_land_in_the_scratch_directory(service):
    r = _grade(service, "tempfiles", "import torch\n" + TEMPFILES + SOFTMAX)
    assert r.status is Status.CORRECT, r.reason


def test_anonymous_temporary_file_is_no_violation(service):
    """What a library does on the GPU host: TemporaryFile() alone, which was floored as
    "wrote outside its scratch directory: /tmp" (O_TMPFILE opens the directory itself)."""
    source = ("import tempfile, torch\nwith tempfile.TemporaryFile() as _f:\n    _f.write(b'x')\n"
              "def run(x):\n    with tempfile.TemporaryFile() as f:\n        f.write(b'x')\n" + SOFTMAX)
    r = _grade(service, "tmpfile", source)
    assert r.status is Status.CORRECT, r.reason


def test_a_candidate_that_asks_who_it_runs_as_gets_a_name(service):
    """Libraries name their cache folders after the user (getpass.getuser(): torch.compile's among them), and the
    worker's uid is in no passwd file: a cheat compiled by torch graded compile_error "KeyError: 'getpwuid(): uid not
    found: 61019'" (H200 run 52, H100 run 86), before any rule could judge it. The worker's environment names a user
    of its own, so such code runs on and is judged for what it does."""
    source = ("import getpass, os, torch\nWHO = getpass.getuser()\n"
              "assert WHO.startswith('kt') and WHO[2:] == str(os.getuid()), WHO\n"
              "def run(x):\n    assert getpass.getuser() == WHO\n" + SOFTMAX)
    r = _grade(service, "whoami", source)
    assert r.status is Status.CORRECT, r.reason


# Genuinely invalid slot configurations: one fails inside the sandbox set-up (stderr still the
# zygote's), one inside the worker's own start (stderr already the scratch log, as on the GPU host).
BAD_CONFIGS = {
    "rlimit": ({"nofile": 10 ** 9}, "ValueError: not allowed to raise maximum limit"),
    "device": ({"device": "no_such_device"}, "no_such_device"),
}


def _children_of(pid: int) -> list[int]:
    """Every child of pid, zombies included (an unreaped worker is one)."""
    kids = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
            kids.append(int(entry))
    return kids


def _start_failure(svc: GraderService, bad: dict):
    slot = svc.slots[0]
    good = slot.config
    slot.config = {**good, **bad}
    try:
        return _grade(svc, "bad_start", HONEST)
    finally:
        slot.config = good


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_start_failure_reaches_the_parent_with_its_traceback(service, case):
    bad, text = BAD_CONFIGS[case]
    before = set(_children_of(service.slots[0].zygote.pid))  # kept expert workers
    r = _start_failure(service, bad)
    assert (r.status, r.reason_code) == (Status.INFRA_ERROR, Reason.INFRA), r.reason
    assert r.reason.startswith("worker failed to start: ") and text in r.reason, r.reason
    assert "Traceback" in r.reason and "channel closed" not in r.reason, r.reason
    left = set(_children_of(service.slots[0].zygote.pid)) - before
    assert not left, f"the failed worker {left} was left behind, not reaped"
    assert _grade(service, "after_bad_start", HONEST).status is Status.CORRECT  # the slot still works


def test_start_failure_in_fresh_mode_reaches_the_parent_too():
    with GraderService(mode="fresh", workers=1) as svc:
        bad, text = BAD_CONFIGS["device"]
        r = _start_failure(svc, bad)
    assert (r.status, r.reason_code) == (Status.INFRA_ERROR, Reason.INFRA), r.reason
    assert r.reason.startswith("worker failed to start: ") and text in r.reason, r.reason


def test_a_candidates_fetches_come_through_its_slots_arena_which_the_next_candidate_finds_scrubbed(service):
    """A candidate worker is lent its slot's output arena before its code loads (later, it is refused); a fetch
    that fits comes back through it (no memfd), one too big for it through a memfd; the slot scrubs the arena when
    the worker is finished, so the slot's next candidate finds none of the last one's bytes. A grade says how its
    outputs came back."""
    import torch

    from grader import wire
    from grader.inputs import make_inputs

    slot = service.slots[0]
    device = service.device
    lent = "pinned" if device.startswith("cuda") else "mapped"  # page-locked on CUDA only
    conn = slot.spawn(60.0)
    try:
        assert slot.lend_output_arena(conn, 1 << 20, 30.0) == lent
        arena = conn.out_arena  # 2 MiB at least: grown to the largest fetch the slot's grades so far needed
        assert arena is not None and arena.nbytes >= 2 << 20
        reply, _, _ = conn.request({"op": "load", "source": HONEST, "entry_point": "run", "ext_offer": []}, 60.0)
        assert reply["ok"], reply
        assert slot.lend_output_arena(conn, 1 << 20, 30.0) == "off: lent after candidate code ran"
        big = arena.nbytes // 2048 + 64  # rows of 1 KiB: input and output together just past the arena
        for rows, through_arena in ((64, True), (big, False)):
            specs = [{"shape": [rows, 256], "dtype": "float32", "dist": "normal", "mean": [0.5, 0.5], "std": [1, 1],
                      "low": 0.0, "high": 1.0}]
            call, _, _ = conn.request({"op": "call", "specs": specs, "seed": 7, "out_nbytes": rows * 256 * 4,
                                       "keep_inputs": True, "tag": "check", "trace": False, "gated": False}, 60.0)
            assert call["ok"], call
            got, _, _ = conn.request({"op": "fetch", "idx": call["idx"], "with_inputs": True}, 60.0)
            assert got["ok"] and got.get("arena", False) is through_arena and got.get("_fd", False) is not through_arena
            tensors = (arena.read(got["tensors"], device) if through_arena
                       else wire.tensors_from_memfd(got["tensors"], wire.recv_fd(conn.sock), device))
            x = make_inputs(specs, 7, device)[0]
            assert torch.equal(tensors[1], x) and torch.allclose(tensors[0], torch.softmax(x, -1), atol=1e-6)
        assert bool(arena.buf.any())
    finally:
        slot.finish(conn)
    assert conn.out_arena is None and not bool(arena.buf.any())  # the slot's arena, kept and scrubbed
    before = service.gpu_lock.stats()["purposes"]
    from grader.answers import AnswerPool

    service.answers = AnswerPool()  # none kept: this grade's reference computes every answer it is verified on
    r = _grade(service, "through_the_arena", HONEST)
    assert r.status.value == "correct" and r.sandbox["output_arena"] == lent, (r.reason, r.sandbox)
    # each size's timed pairs recorded in order, for the acceptance's replay of fewer pairs
    assert all(len(s.loop["log2_pairs"]) == s.reps > 0 for s in r.sizes), [(s.reps, s.loop) for s in r.sizes]
    # and its check work is broken down in the lock's stats: the verifications' parts, the reference worker's own
    after = service.gpu_lock.stats()["purposes"]
    for part in ("verify: fetch", "verify: reference", "verify: compare", "reference worker: run",
                 "reference worker: write", "reference worker: round trip",
                 "reference worker: read onto this side's device", "check window",
                 # a size's first answer in its worker (it allocates afresh), counted apart from the later ones
                 "reference worker, at a size new to its worker: run"):
        assert after[part][0] > before.get(part, (0, 0.0))[0], (part, after.get(part))
    # a size's first check call counted apart (a kernel specialised on the size compiles in it); the attempt's very
    # first, which compiles under no hold, is in neither
    firsts = after["check call, a size's first: call"][0] - before.get("check call, a size's first: call", (0, 0))[0]
    others = after.get("check call: call", (0, 0))[0] - before.get("check call: call", (0, 0))[0]
    calls = service.effort.check_calls
    assert (firsts, others) == (len(r.sizes) - 1, len(r.sizes) * calls - len(r.sizes)), (firsts, others, calls)
    # each size's traced call broken down: the worker's parts of the call and of its sessions, and the round trips
    # that open and close its own observation (no warm-up pairs on the CPU: it is always one of the loop's calls)
    for part in ("traced call: call", "traced call: round trip", "traced call: ops' session closed",
                 "traced call: device's session opened", "traced call: device's session closed",
                 "traced call: ops' session reopened", "traced call: observation opened (round trip)",
                 "traced call: observation closed and reported (round trip)"):
        assert after[part][0] - before.get(part, (0, 0.0))[0] == len(r.sizes), (part, after[part])
    assert after["traced call: round trip"][1] > before.get("traced call: round trip", (0, 0.0))[1]
    assert after["check call, a size's first: its device time"][0] > before.get(
        "check call, a size's first: its device time", (0, 0))[0]
    warmed = ("expert warm-up: call", "expert warm-up, compiling: call")  # its first at a size in its worker compiles
    assert sum(after.get(k, (0, 0.0))[0] - before.get(k, (0, 0.0))[0] for k in warmed) == len(r.sizes), after
    # with `Effort.check_windows` each piece of check work takes a check window (one purpose for all), and the timed
    # outputs are verified in the timing loop's hold
    for one_each in ("check call", "verify a check call", "verify a timed call", "expert warm-up", "check calls"):
        assert after.get(one_each, (0, 0.0))[0] == before.get(one_each, (0, 0.0))[0], (one_each, after.get(one_each))
    # a worker's start and end by part (`Slot.note`): this grade's candidate started (the slot keeps no spare on the
    # CPU) and was killed and reaped at its end
    for part in ("worker start, candidate: boot", "worker start, candidate: to its hello and gate",
                 "worker end, candidate: killed and reaped"):
        assert after[part][0] > before.get(part, (0, 0.0))[0], (part, after.get(part))
    # and its boot by part (the worker's clock, told in its hello): they add up to no more than the boot
    boot_parts = {k: after[k][1] - before.get(k, (0, 0.0))[1] for k in after
                  if k.startswith("worker start, candidate: boot's ")}
    assert set(boot_parts) == {f"worker start, candidate: boot's {k}" for k in ("cuda", "clock", "profiler", "rest")}
    boot = after["worker start, candidate: boot"][1] - before.get("worker start, candidate: boot", (0, 0.0))[1]
    assert 0 < sum(boot_parts.values()) <= boot + 1e-3 and min(boot_parts.values()) >= 0, (boot_parts, boot)
    # and the slot's time by part of the grade (`session._part`): each its own time, so with the phases before the
    # first size and after the last they add up to the grade's wall time, and the table says what is left
    from bench.gpu_acceptance import OUTSIDE_PARTS, part_lines
    from grader.session import COMPILING_CALL_PART

    parts = {k: (after[k][0] - before.get(k, (0, 0.0))[0], after[k][1] - before.get(k, (0, 0.0))[1])
             for k in after if k.startswith("grade: ")}
    for part in ("timing loop", "check call", "verification, of a check call", "verification, of a timed call",
                 "a size's other work", "observation, opened", "observation, closed", "observation, judged",
                 "expert's warm-up"):
        assert parts[f"grade: {part}"][0] > 0, (part, parts)  # a judgement is host work of microseconds: 0.0 s
    assert parts["grade: a size's other work"][0] == len(r.sizes)
    named = (sum(s for _, s in parts.values()) + sum(r.phase_seconds[p] for p in OUTSIDE_PARTS)
             - parts[f"grade: {COMPILING_CALL_PART}"][1])  # the compile phase holds the attempt's first call too
    total = r.phase_seconds["total"]
    rounding = 2e-3 * len(parts)  # the lock's stats round each purpose's seconds to the millisecond
    assert 0.9 * total < named <= total + rounding, (named, total, parts)
    table = part_lines([r], {k: list(v) for k, v in parts.items()})
    rest = next(line for line in table if line.startswith("  none of these\t")).split("\t")
    assert abs(float(rest[2]) - (total - named)) < 0.06, (rest, total - named)
    assert float(table[2].split("\t")[2]) == round(max(
        [s for _, s in parts.values()] + [r.phase_seconds[p] for p in ("startup", "teardown")]
        + [r.phase_seconds["compile"] - parts[f"grade: {COMPILING_CALL_PART}"][1], total - named]), 1), table


SLOW = HONEST.replace("def run(x):\n", "import time\ndef run(x):\n    time.sleep(0.03)\n")


def test_a_slow_candidates_size_is_done_after_one_warm_up_pair_and_one_clean_pair_past_the_bound(service,
                                                                                                  monkeypatch):
    """`Effort.slow_loops`: a candidate whose warm-up call ran 20 ms or more gets one warm-up pair, and one clean
    timed pair past the one-pair bound ends its size. Switched off, the same candidate takes every warm-up pair and
    `min_reps` timed pairs. With `Effort.slow_checks_warm` its two check calls, 20 ms or more each, stand for the
    warm-up pair: none is made, but at the first size, whose first check call compiled (its time is the compiler's).
    On CPU the expert is Triton's interpreter (0.25 s a call), so no candidate here is 256 times slower than it: the
    bound is moved above this candidate's ratio (its value: the test above)."""
    import dataclasses

    from grader import session

    monkeypatch.setattr(session, "ONE_PAIR_CLIP_MARGIN_LOG2", -12.0)
    kept = service.effort
    assert kept.slow_checks_warm  # the service's default since grader 0.22.0 (`--without slow_checks_warm`)
    try:
        # (warm-up pairs at the first size, at the others); the traced call may take a timed pair's turn
        for slow_loops, checks_warm, warmups, pairs in ((True, False, (1, 1), {1}), (True, True, (1, 0), {1}),
                                                        (False, True, (2, 2), {5, 6})):
            service.effort = dataclasses.replace(kept, warmup_pairs=2, min_reps=6, max_reps=6, slow_loops=slow_loops,
                                                 check_calls=2, slow_checks_warm=checks_warm)
            traced = service.gpu_lock.stats()["purposes"].get("traced call: call", (0, 0.0))[0]
            r = _grade(service, f"slow_{slow_loops}_{checks_warm}", SLOW)
            assert r.status is Status.CORRECT and len(r.sizes) >= 2, r.reason
            for i, s in enumerate(r.sizes):  # in the order graded: the first size's first check call compiled
                assert s.loop["warmup_pairs"] == warmups[i > 0] and s.loop["pairs"] in pairs, (slow_loops, checks_warm,
                                                                                               i, s.loop)
            # every size still had its traced call, where no warm-up or timed pair was left to draw it
            assert service.gpu_lock.stats()["purposes"]["traced call: call"][0] - traced == len(r.sizes)
    finally:
        service.effort = kept


def test_without_check_windows_a_sizes_check_work_shares_one_shared_hold(service, monkeypatch):
    """`Effort.check_windows` off (0.14.0, for the acceptance's A/B): a size's check calls, their verifications and
    the expert's warm-up share one shared hold ("check calls", once a size: the first size's after its compiling
    first call), and take no check window."""
    import dataclasses

    before = service.gpu_lock.stats()
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, check_windows=False))
    r = _grade(service, "check_windows_off", HONEST)
    assert r.status is Status.CORRECT, r.reason
    after = service.gpu_lock.stats()
    assert after["check_windows"] == before["check_windows"]
    held = after["purposes"]["check calls"][0] - before["purposes"].get("check calls", (0, 0.0))[0]
    assert held == len(r.sizes), (held, r.sizes)


def test_check_windows_each_piece_of_check_work_and_a_warm_experts_first_call_at_a_size(service, monkeypatch):
    """`Effort.check_windows`: per size, the check call (but the attempt's first, which compiles), the four pieces
    of its verification (fetch, inputs, reference, comparison) and the expert's first call, once its worker has
    run at the size (the call that compiles holds nothing), each take a check window; on the CPU a timing loop
    holds the device alone, and its timed outputs are verified in it. Graded twice, the second grade's expert is
    warm at every size. A verification on a kept answer (grader.answers) compares in the answer's own window."""
    if not (service.effort.check_windows and service.effort.check_calls == 1):
        pytest.skip("the count is the CPU's effort's: one check call a size")
    from grader.answers import AnswerPool

    monkeypatch.setattr(service, "answers_for_waiting", False)  # kept for the next call, each grade its own
    _grade(service, "check_windows_warm", HONEST)
    service.answers = AnswerPool()  # none kept: every answer computed, then kept for the third grade
    for name, windows in (("check_windows_counted", 6), ("check_windows_on_kept_answers", 5)):
        before = service.gpu_lock.stats()["check_windows"]
        r = _grade(service, name, HONEST)
        assert r.status is Status.CORRECT, r.reason
        assert service.gpu_lock.stats()["check_windows"] - before == windows * len(r.sizes) - 1, (name, r.sizes)


def test_a_worker_gives_its_cached_device_memory_back_at_a_new_size_and_only_then(service):
    """`op: trim` (asked by the parent at each new size, outside any window): the worker empties its allocator's
    cache when the size differs from the last one's, and says so; the same size again empties nothing. It changes
    nothing the worker's integrity check guards but the size it notes. On the GPU the device gets the memory back;
    asked to `keep`, the worker notes the size, keeps the memory and says so, and the same size after empties
    nothing."""
    slot = service.slots[0]
    cuda = service.device.startswith("cuda")
    conn = slot.spawn(60.0)
    try:
        reply, _, _ = conn.request({"op": "load", "source": HONEST, "entry_point": "run", "ext_offer": []}, 60.0)
        assert reply["ok"], reply
        rows = 1 << 16  # 64 MiB of inputs and as much output
        specs = [{"shape": [rows, 256], "dtype": "float32", "dist": "normal", "mean": [0.5, 0.5], "std": [1, 1],
                  "low": 0.0, "high": 1.0}]
        call, _, _ = conn.request({"op": "call", "specs": specs, "seed": 7, "out_nbytes": rows * 256 * 4,
                                   "keep_inputs": False, "tag": "check", "trace": False, "gated": False}, 60.0)
        assert call["ok"], call
        released, _, _ = conn.request({"op": "release"}, 60.0)
        assert released["ok"], released
        used = service.watch.used if cuda and service.watch is not None else (lambda: None)
        before = used()
        first, _, _ = conn.request({"op": "trim", "key": "a"}, 60.0)
        after = used()
        again, _, _ = conn.request({"op": "trim", "key": "a"}, 60.0)
        other, _, _ = conn.request({"op": "trim", "key": "b"}, 60.0)
        # asked to keep (`Effort.keep_size_memory`, the device having room): the size is noted, the memory kept
        call, _, _ = conn.request({"op": "call", "specs": specs, "seed": 8, "out_nbytes": rows * 256 * 4,
                                   "keep_inputs": False, "tag": "check", "trace": False, "gated": False}, 60.0)
        assert call["ok"], call
        released, _, _ = conn.request({"op": "release"}, 60.0)
        assert released["ok"], released
        before_kept = used()
        kept, _, _ = conn.request({"op": "trim", "key": "c", "keep": True}, 60.0)
        after_kept = used()
        noted, _, _ = conn.request({"op": "trim", "key": "c"}, 60.0)
    finally:
        slot.finish(conn)
    for r in (first, again, other, kept, noted):
        assert r["ok"] and not r.get("tampered"), r
    assert (first["emptied"], again["emptied"], other["emptied"]) == (cuda, False, cuda)
    assert (kept["emptied"], kept["kept"], noted["emptied"], noted["kept"]) == (False, cuda, False, False)
    if before is not None and after is not None:
        assert before - after >= 64 << 20, (before, after)  # the call's inputs and output, cached until now
    if before_kept is not None and after_kept is not None:
        assert before_kept - after_kept < 64 << 20, (before_kept, after_kept)  # kept: nothing given back


@pytest.mark.gpu
def test_a_reference_answer_through_its_gate_is_the_ungated_answer_and_holds_only_its_device_work(service):
    """`Effort.gated_reference`: a reference worker has a launch gate; asked `gated`, it allocates the inputs, closes
    the gate and says "drawn" with no device work before, queues the draw, the reference's run and the copy into its
    page-locked arena behind it, says "queued", and finishes once the parent opens the gate in the window it takes
    ("device": the only window). The answer is the one the same seed gets ungated, and a warm worker's gated answer
    needs no patience (not stalled)."""
    import torch

    from grader.catalogue import load_catalogue

    if not service.device.startswith("cuda"):
        pytest.skip("needs a CUDA device: a CPU worker has no launch gate")
    card = load_catalogue()[TASK]
    slot = service.slots[0]
    conn = slot.reference("gated-test", card.reference, card.error_scale, 60.0, 64 << 20)
    assert conn.gate is not None and conn.arena is not None and conn.arena.pinned
    specs = [{"shape": [4096, 1024], "dtype": "float32", "dist": "normal", "mean": [0.5, 0.5], "std": [1, 1],
              "low": 0.0, "high": 1.0}]
    msg = {"op": "reference", "specs": specs, "task_inputs": False, "key": "gated-test"}
    windows: list[str] = []

    def window(kind):
        windows.append(kind)
        return contextlib.nullcontext()

    try:
        answers = []
        for seed, gated in ((5, False), (6, False), (5, True), (6, True)):
            reply, _, _ = conn.request({**msg, "seed": seed, **({"gated": True, "fill_behind": True} if gated else {})},
                                       60.0, window=window if gated else None)
            assert reply["ok"] and reply["arena"] and reply.get("gated", False) is gated, reply
            if gated:
                assert reply.get("stalled") is False, reply
            answers.append(conn.arena.read(reply["tensors"], service.device)[0])
    finally:
        slot.drop_reference("gated-test")
    assert windows == ["device", "device"], windows
    assert torch.equal(answers[0], answers[2]) and torch.equal(answers[1], answers[3])
    assert not torch.equal(answers[0], answers[1])


@pytest.mark.gpu
def test_a_references_work_on_a_stream_of_its_own_is_done_before_it_answers(service):
    """A task's reference is corpus code: one that leaves a kernel running on a stream of its own and returns would
    have it run on after its check window, beside another slot's timed call (the answer's copy into the arena waits
    for the worker's stream only). The worker synchronises the whole device after the reference's run, inside the
    window: the run's part of its time holds the side stream's 100 ms."""
    from grader.catalogue import load_catalogue

    if not service.device.startswith("cuda"):
        pytest.skip("needs a CUDA device: a CPU reference has no stream")
    card = load_catalogue()[TASK]
    leaves = ("import torch\n"
              "def run(x):\n"
              "    side = torch.cuda.Stream()\n"
              "    with torch.cuda.stream(side):\n"
              "        torch.cuda._sleep(200_000_000)  # about 100 ms at the H200's 1.98 GHz\n"
              "    return x.sum(-1)\n")
    slot = service.slots[0]
    conn = slot.reference("side-stream-test", leaves, None, 60.0, 1 << 20)
    specs = [{"shape": [64, 256], "dtype": "float32", "dist": "normal", "mean": [0.5, 0.5], "std": [1, 1],
              "low": 0.0, "high": 1.0}]
    try:
        for seed in (1, 2):  # the second: kernels loaded, memory cached
            reply, _, _ = conn.request({"op": "reference", "specs": specs, "seed": seed, "task_inputs": False,
                                        "key": "side-stream-test"}, 60.0)
            assert reply["ok"], reply
            assert reply["parts_ms"][2] >= 50.0, reply["parts_ms"]
    finally:
        slot.drop_reference("side-stream-test")
    assert card.reference  # the task's own reference was not touched


def test_a_reference_asked_for_a_gated_answer_it_cannot_queue_says_so_before_any_device_work(service):
    """Without a launch gate (the CPU), or for a task's own inputs, a reference worker asked `gated` refuses at once
    (`error_kind: gate`), having drawn nothing: the parent then asks again, ungated, inside a window
    (`session._reference`). The worker answers the same request ungated afterwards."""
    from grader.catalogue import load_catalogue

    card = load_catalogue()[TASK]
    slot = service.slots[0]
    conn = slot.reference("refusal-test", card.reference, card.error_scale, 60.0, 1 << 20)
    specs = [{"shape": [64, 256], "dtype": "float32", "dist": "normal", "mean": [0.5, 0.5], "std": [1, 1],
              "low": 0.0, "high": 1.0}]
    msg = {"op": "reference", "specs": specs, "seed": 3, "key": "refusal-test"}
    try:
        cases = [{"task_inputs": True}] + ([] if service.device.startswith("cuda") else [{"task_inputs": False}])
        for extra in cases:
            refused, _, _ = conn.request({**msg, **extra, "gated": True}, 60.0)
            assert (refused["ok"], refused["error_kind"]) == (False, "gate"), refused
            assert "parts_ms" not in refused and not refused.get("tampered"), refused
        answer, _, _ = conn.request({**msg, "task_inputs": False}, 60.0)
        assert answer["ok"] and answer["gated"] is False and answer["arena"], answer
    finally:
        slot.drop_reference("refusal-test")


def test_a_grade_started_ahead_starts_its_task_worker_once_on_a_thread_of_its_own(service, monkeypatch):
    """`Effort.start_ahead` (on by default since grader 0.22.0): where the slot keeps none, the task's worker (its
    expert and reference in one, `task_workers`) starts on a slot's thread ahead of the grade's own calls
    (`Slot.start_ahead`), which wait for that start and take its worker: it starts once, and the grade is as without.
    Switched off (`--without start_ahead`), the grade's own first size starts it."""
    import dataclasses
    import threading
    import time

    slot = service.slots[0]
    key = service.task(TASK).expert_key
    started = []
    spawn = slot._spawn

    def recorded(*args, **kwargs):
        if kwargs.get("role") in ("expert", "reference", "task"):
            started.append((kwargs["role"], kwargs.get("aside", False), threading.current_thread().name))
            if threading.current_thread().name.startswith("slot0-ahead"):  # still starting when the grade asks
                time.sleep(1.0)
        return spawn(*args, **kwargs)

    monkeypatch.setattr(slot, "_spawn", recorded)
    for ahead in (True, False):  # the service's default first
        if not ahead:
            monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, start_ahead=False))
        slot.drop_expert(key)
        slot.drop_reference(key)
        started.clear()
        r = _grade(service, f"started_ahead_{ahead}", HONEST)
        assert r.status is Status.CORRECT, r.reason
        # one worker serves the task's expert and reference (`task_workers`, on by default): one start, ahead or not
        assert len(started) == 1 and started[0][0] == "task", started
        if ahead:
            assert started[0][1:] == (True, "slot0-ahead0"), started
        else:
            assert not started[0][1] and not started[0][2].startswith("slot0-ahead"), started
        roles = list(slot.live.values())  # this module grades one task: its one kept worker, and no second
        assert roles.count("task") == 1 and "expert" not in roles and "reference" not in roles, slot.live


FIRST_CALL_SLOW = HONEST.replace("def run(x):\n", "import time\n_FIRST = [True]\ndef run(x):\n"
                                 "    if _FIRST.pop() if _FIRST else False:\n        time.sleep(3.5)\n")


def test_with_first_call_early_the_attempts_first_call_runs_while_its_tasks_worker_is_still_starting(service,
                                                                                                    monkeypatch):
    """`Effort.first_call_early` (opt-in): at the grade's first size the attempt's first call, which compiles and
    needs nothing of the task's worker, runs before the grade waits for that worker (started ahead), so the slot waits
    for the worker's start only where it outlasts the load and the call. Here the worker's start takes 3 s more than
    it would (on its ahead thread) and the first call 3.5 s: without the part the slot waits those 3 s after the
    load, with it hardly at all. A first call that raises ends the grade with the worker still starting, and the next
    grade finds that worker kept and in step."""
    import dataclasses
    import threading
    import time

    slot = service.slots[0]
    key = service.task(TASK).expert_key
    spawn = slot._spawn

    def slow_ahead(*args, **kwargs):
        if threading.current_thread().name.startswith("slot0-ahead"):
            time.sleep(3.0)
        return spawn(*args, **kwargs)

    monkeypatch.setattr(slot, "_spawn", slow_ahead)
    part = "grade: reference's worker, kept or started"
    waited = {}
    for early in (True, False):
        monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, first_call_early=early))
        slot.drop_expert(key)
        slot.drop_reference(key)
        before = service.gpu_lock.stats()["purposes"].get(part, (0, 0.0))[1]
        r = _grade(service, f"first_call_early_{early}", FIRST_CALL_SLOW)
        assert r.status is Status.CORRECT, r.reason
        waited[early] = service.gpu_lock.stats()["purposes"][part][1] - before
    assert waited[True] < 0.5 and waited[False] > 1.5, waited
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, first_call_early=True))
    slot.drop_expert(key)
    slot.drop_reference(key)
    r = _grade(service, "first_call_raises_early", "def run(x):\n    raise ValueError('at once')\n")
    assert r.status is Status.RUNTIME_ERROR, r.reason
    r = _grade(service, "after_it", HONEST)
    assert r.status is Status.CORRECT, r.reason


def test_an_attempts_first_call_that_raises_is_charged_to_its_compile_phase_as_its_part_is(service):
    """The attempt's first call is its own part (`session.COMPILING_CALL_PART`) and is charged to the compile phase,
    which the acceptance's table takes it out of once: so a first call that raises is in both too."""
    from grader.session import COMPILING_CALL_PART

    name = f"grade: {COMPILING_CALL_PART}"
    before = service.gpu_lock.stats()["purposes"].get(name, (0, 0.0))
    r = _grade(service, "raises_late", "import time\ndef run(x):\n    time.sleep(0.3)\n    raise ValueError('late')\n")
    assert r.status is Status.RUNTIME_ERROR, r.reason
    after = service.gpu_lock.stats()["purposes"][name]
    took = after[1] - before[1]
    assert after[0] == before[0] + 1 and took >= 0.3, (before, after)
    assert r.phase_seconds["compile"] >= took - 2e-3, (r.phase_seconds, took)


CYCLE = HONEST.replace("def run(x):\n", '''_SEEN = {"first": None, "finalised": False}


class _Cycle:
    def __init__(self):
        self.me = self

    def __del__(self):
        _SEEN["finalised"] = True


def run(x):
    if _SEEN["first"] is None:
        _SEEN["first"] = tuple(x.shape)
        _Cycle()  # garbage at once, but only a collection frees a cycle
    elif tuple(x.shape) != _SEEN["first"] and not _SEEN["finalised"]:
        return torch.zeros_like(x)  # wrong from the next size on, unless the release collected it
''')


def test_a_sizes_release_still_collects_the_candidates_cyclic_garbage_though_the_worker_froze_its_own(service):
    """The worker freezes what it holds before any candidate code runs (`gc.freeze`, so a release walks only what was
    made since), and a release still collects what the candidate made: its cycle is finalised before the next size,
    or the candidate answers wrong there."""
    r = _grade(service, "cycle_collected", CYCLE)
    assert len(r.sizes) >= 2 and r.status is Status.CORRECT, (r.status, r.reason)


@pytest.mark.gpu
def test_a_timed_pair_takes_one_device_window(service):
    """`Effort.paired_windows` on the device: each timed pair of a loop is let through in one device window
    (`launcher.let_through_together`), so a grade's loops take one device window per timed pair, not one per call,
    and an honest attempt still grades correct with both calls of every pair timed."""
    if not service.device.startswith("cuda"):
        pytest.skip("needs a CUDA device: a CPU worker has no launch gate, and its loops hold the device whole")
    assert service.effort.paired_windows and service.gpu_lock.interleave
    before = service.gpu_lock.stats()["windows"]
    r = _grade(service, "paired", HONEST)
    taken = service.gpu_lock.stats()["windows"] - before
    assert r.status is Status.CORRECT, r.reason
    pairs = sum(s.reps for s in r.sizes)
    assert pairs > 0 and taken == pairs, (taken, [(s.size_key, s.reps) for s in r.sizes])
    assert all(s.cand_ms and s.expert_ms for s in r.sizes)


@pytest.mark.gpu
def test_a_timed_pairs_twin_goes_at_the_candidates_settled(service, monkeypatch):
    """`Effort.settled_pairs` on the device: the candidate's worker, asked, says "settled" after "done" and replies
    after it, so the pair's twin is let through at it; an honest attempt still grades correct with one device window
    per pair, and an attempt that installs a hook in its call is still floored by the check that now runs beside the
    twin."""
    if not service.device.startswith("cuda"):
        pytest.skip("needs a CUDA device: a CPU worker has no launch gate, and says nothing before its reply")
    import dataclasses

    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, settled_pairs=True))
    before = service.gpu_lock.stats()["windows"]
    r = _grade(service, "settled", HONEST)
    taken = service.gpu_lock.stats()["windows"] - before
    assert r.status is Status.CORRECT, r.reason
    assert taken == sum(s.reps for s in r.sizes) > 0, (taken, [(s.size_key, s.reps) for s in r.sizes])
    r = _grade(service, "settled_hook", HOOKED_LATE)
    assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.INTERPRETER), (r.status, r.reason)


@pytest.mark.gpu
def test_check_calls_through_their_gates_take_two_draws_each_and_still_judge(service, monkeypatch):
    """`Effort.gated_check_calls` on the device: every check call but the attempt's first goes through the candidate's
    gate, in a draw up to its closed gate and one from its opening to its reply; an honest attempt grades correct, a
    wrong one is still `wrong_output`, and one that scribbles on its input still `input_mutated` (its kept inputs are
    copied inside the second draw)."""
    if not service.device.startswith("cuda"):
        pytest.skip("needs a CUDA device: a CPU worker has no launch gate")
    import dataclasses

    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, gated_check_calls=True))
    r = _grade(service, "gated_checks", HONEST)
    assert r.status is Status.CORRECT, r.reason
    draws = service.gpu_lock.stats()["draws_by"]
    for part in ("drawn", "let through"):
        assert draws.get(f"check window: check call, gated, {part}", [0])[0] > 0, draws
    # each from its second call on: the attempt's first call is never gated
    late = HONEST.replace("import torch\n", "import torch\n\n_N = [0]\n\n\n").replace(
        "def run(x):\n", "def run(x):\n    _N[0] += 1\n")
    unnormalised = "    return e if _N[0] > 1 else e / e.sum(-1, keepdim=True)"
    wrong = _grade(service, "gated_checks_wrong", late.replace("    return e / e.sum(-1, keepdim=True)", unnormalised))
    assert (wrong.status, wrong.reason_code) == (Status.WRONG_OUTPUT, Reason.MISMATCH), wrong.reason
    scribbles = _grade(service, "gated_checks_scribbles",
                       late.replace("    e = ", "    if _N[0] > 1:\n        x.mul_(1.5)\n    e = "))
    assert (scribbles.status, scribbles.reason_code) == (Status.CHEAT_FLAGGED, Reason.INPUT_MUTATED), scribbles.reason


HOOKED_LATE = HONEST.replace("import torch\n", "import gc\nimport torch\n\n_N = [0]\n\n\n").replace(
    "def run(x):\n", "def run(x):\n    _N[0] += 1\n    if _N[0] > 4:  # past the first size's check and warm-up calls\n"
    "        gc.callbacks.append(lambda phase, info: None)\n")
"""An honest softmax that hooks the collector from its fifth call on: in a timing loop's pairs on a GPU."""


def test_a_hook_installed_in_a_timed_call_is_floored(service):
    """The interpreter's check after a timed call finds a collector hook the call installed (on a GPU, with
    `Effort.settled_pairs`, beside the twin: `test_a_timed_pairs_twin_goes_at_the_candidates_settled`)."""
    r = _grade(service, "hooked_late", HOOKED_LATE)
    assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.INTERPRETER), (r.status, r.reason)


def _hear_releases(monkeypatch) -> list[tuple[str, bool]]:
    """What each request waiting for a worker's word heard from now on: (the word awaited, whether the worker said it
    rather than replying in its place)."""
    from grader.launcher import WorkerConn

    heard = []
    real = WorkerConn._frame_or_reply

    def spy(self, cap, stage):
        got = real(self, cap, stage)
        heard.append((stage, got is None))
        return got

    monkeypatch.setattr(WorkerConn, "_frame_or_reply", spy)
    return heard


def test_a_traced_call_released_before_its_sessions_close_still_grades_and_judges(service, monkeypatch):
    """`Effort.traced_release` (on): each size's traced call, asked, says "released" once it is over and the device
    synchronised (the parent's draw for it ends there) and replies after its sessions close and its interpreter is
    checked. The real worker says it (every traced call's request ended at its "released", none at a reply in its
    place); an honest attempt grades correct with each traced call's parts counted, and a hook installed in a call
    is still floored."""
    import dataclasses

    heard = _hear_releases(monkeypatch)
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, traced_release=True))
    before = service.gpu_lock.stats()["purposes"].get("traced call: call", (0, 0.0))[0]
    r = _grade(service, "traced_release", HONEST)
    assert r.status is Status.CORRECT, r.reason
    traced = service.gpu_lock.stats()["purposes"]["traced call: call"][0] - before
    assert traced == len(r.sizes) > 0 and heard == [("released", True)] * traced, (traced, heard)
    r = _grade(service, "traced_release_hooked", HOOKED_LATE)
    assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.INTERPRETER), (r.status, r.reason)
    # off, the draw holds the whole request: nothing is asked, nothing said
    heard.clear()
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, traced_release=False))
    r = _grade(service, "traced_whole", HONEST)
    assert r.status is Status.CORRECT and r.sizes and heard == [], (r.reason, heard)


def test_warm_up_calls_released_before_their_checks_still_grade_and_judge(service, monkeypatch):
    """`Effort.warmup_release`: a warm-up pair's calls, the twin's and the candidate's, say "released" once over and
    the device synchronised (their draws end there) and reply after their records and interpreter checks. The real
    workers say it (every such request ended at its "released"), each warm-up call asked it (the twin's every time,
    the candidate's unless the traced call's draw fell on it: taken whole here, `traced_release` off), an honest
    attempt grades correct, and a hook a candidate installs in a call is still floored."""
    import dataclasses

    from grader.launcher import WorkerConn

    heard = _hear_releases(monkeypatch)
    asked = []  # (the call's tag, whether traced, whether its window ends at "released") of each call request
    real_request = WorkerConn.request

    def request(self, msg, *args, **kwargs):
        if msg.get("op") == "call":
            asked.append((msg.get("tag"), bool(msg.get("trace")), kwargs.get("released") is not None))
        return real_request(self, msg, *args, **kwargs)

    monkeypatch.setattr(WorkerConn, "request", request)
    tuned = dict(warmup_pairs=1, min_reps=2, max_reps=2, traced_release=False)
    assert service.effort.warmup_release  # the service's default since grader 0.23.0
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, **tuned))
    r = _grade(service, "warmup_release", HONEST)
    assert r.status is Status.CORRECT and r.sizes, r.reason
    pairs = sum(s.loop["warmup_pairs"] for s in r.sizes)
    twins = [a for a in asked if a[0] == "expert" and a[2]]
    candidates = [a for a in asked if a[0] == "warmup"]
    assert pairs == len(r.sizes) == len(twins) == len(candidates), (pairs, asked)
    assert all(released != traced for _, traced, released in candidates), candidates
    assert len(heard) == sum(a[2] for a in asked) and set(heard) == {("released", True)}, (heard, asked)
    r = _grade(service, "warmup_release_hooked", HOOKED_LATE)
    assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.INTERPRETER), (r.status, r.reason)
    heard.clear()  # off: the draws hold the whole requests, nothing is asked, nothing said
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, warmup_release=False))
    r = _grade(service, "warmup_whole", HONEST)
    assert r.status is Status.CORRECT and r.sizes and heard == [], (r.reason, heard)


RAISES_FIRST = "def run(x):\n    raise ValueError('at its first call')\n"


def test_with_expert_early_the_experts_compiling_call_is_read_after_the_first_check_call_and_never_left_unread(
        service, monkeypatch):
    """`Effort.expert_early` (opt-in): at each size new to the task's worker the expert's compiling call is sent
    before the size's first check call and read right after it (`session._expert_early`), in place of the warm-up
    after the check calls; the grade is as without it. A candidate whose first call raises ends its grade with that
    call sent: its reply is read on the way out, so the kept worker answers the next grade in step."""
    import dataclasses

    slot = service.slots[0]
    key = service.task(TASK).expert_key
    monkeypatch.setattr(service, "effort", dataclasses.replace(service.effort, expert_early=True))
    stats = service.gpu_lock.stats

    def counts() -> dict:
        return {k: v[0] for k, v in stats()["purposes"].items() if k.startswith("expert warm-up")}

    slot.drop_expert(key)
    before = counts()
    r = _grade(service, "expert_early_honest", HONEST)
    assert r.status is Status.CORRECT, r.reason
    after = counts()
    early = "expert warm-up, compiling, early: round trip"
    assert after.get(early, 0) - before.get(early, 0) == len(r.sizes), (before, after)
    assert after.get("expert warm-up, compiling: round trip") == before.get("expert warm-up, compiling: round trip")
    assert r.phase_seconds["expert"] > 0
    slot.drop_expert(key)
    r = _grade(service, "expert_early_raises", RAISES_FIRST)
    assert r.status is Status.RUNTIME_ERROR, r.reason
    conn = slot._kept[f"task:{key}"]
    assert not conn.awaited
    r = _grade(service, "expert_early_after", HONEST)
    assert r.status is Status.CORRECT, r.reason
    assert slot._kept[f"task:{key}"] is conn  # the same kept worker, in step


def test_a_worker_with_a_reply_awaited_is_asked_nothing_else(service):
    """`WorkerConn.begin`: until the reply it awaits is read, `request` refuses, so no reply is read as another's."""
    from grader import wire

    slot = service.slots[0]
    conn = slot.task("awaited@1", HONEST, HONEST, None, 60.0)
    try:
        specs = [{"shape": [4, 8], "dtype": "float32", "dist": "normal", "mean": [0.0, 0.0], "std": [1, 1],
                  "low": 0.0, "high": 1.0}]
        call = {"op": "call", "specs": specs, "seed": 3, "out_nbytes": 4 * 8 * 4, "keep_inputs": False,
                "tag": "check", "trace": False, "gated": False}
        read = conn.begin(call, 60.0)
        with pytest.raises(wire.WireError, match="still awaited"):
            conn.request(call, 60.0)
        reply, _, _ = read()
        assert reply["ok"] and not conn.awaited, reply
        again, _, _ = conn.request(call, 60.0)
        assert again["ok"], again
    finally:
        slot.drop_reference("awaited@1")
