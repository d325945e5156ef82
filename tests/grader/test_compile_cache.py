"""The extension compile cache: keys, tamper and corruption handling, and one real C++ build.

The real build runs the worker side in separate interpreters (one compiles, one is served from
the cache), as grading workers would; the parent side runs in the test process.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from grader.compile_cache import (BuildEnv, CompileCache, binding, cache_key, material_of, pack, sealed_from,
                                  sha256_hex, unpack)
from tests.conftest import REPO_ROOT

ENV = BuildEnv("2.x", None, "cpu", "c++ test")
MAT_A = material_of("load_inline", {"name": "ext_a", "cpp_sources": "int f(){return 1;}", "functions": ["f"],
                                    "extra_cflags": ["-O3"], "verbose": True, "build_directory": "/tmp/x"})


def _digest(material: dict) -> str:
    return sha256_hex(json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def test_material_and_keys() -> None:
    # One source string and a list of it build the same thing; where and how loudly do not count.
    same = material_of("load_inline", {"name": "ext_a", "cpp_sources": ["int f(){return 1;}"], "functions": ["f"],
                                       "extra_cflags": ["-O3"], "verbose": False, "build_directory": "/elsewhere"})
    assert same == MAT_A and "verbose" not in MAT_A and "build_directory" not in MAT_A
    flags = dict(MAT_A, extra_cflags=["-O0"])
    assert _digest(flags) != _digest(MAT_A)
    assert material_of("load_inline", {"name": "x", "cpp_sources": "", "is_python_module": False}) is None
    b1, b2 = binding("print(1)", ENV), binding("print(2)", ENV)
    assert b1 != b2 and binding("print(1)", BuildEnv("2.x", None, "sm_90", "c++ test")) != b1
    assert cache_key(b1, _digest(MAT_A)) != cache_key(b2, _digest(MAT_A))


def test_pack_drops_items_that_lie_about_bounds() -> None:
    index, payload = pack([({"a": 1}, b"xyz"), ({"a": 2}, b"0123")])
    assert [(m["a"], d) for m, d in unpack(index, payload)] == [(1, b"xyz"), (2, b"0123")]
    index[1]["size"] = 99
    index.append({"offset": -1, "size": 2})
    assert [m["a"] for m, _ in unpack(index, payload)] == [1]


def test_root_and_secret_are_private(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    assert stat.S_IMODE(os.stat(cache.root).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache.root / ".secret").st_mode) == 0o600
    assert CompileCache(cache.root)._secret == cache._secret  # a second parent reads the same secret


@pytest.mark.skipif(os.geteuid() != 0, reason="handing a directory to another user needs root")
def test_root_made_by_another_user_is_refused(tmp_path: Path) -> None:
    # A shared /tmp: someone else's directory at the default root (whose secret they know) is not used.
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chown(planted, os.geteuid() + 4242, os.geteuid() + 4242)
    with pytest.raises(PermissionError):
        CompileCache(planted)
    assert not (planted / ".secret").exists()


def test_cache_only_used_when_the_worker_cannot_reach_it() -> None:
    root = "/srv/kt/ext-cache"  # only compared as a path, never created
    me = os.geteuid()
    assert sealed_from({"uid": me + 1000, "mount_ns": "off: EPERM"}, root)
    assert sealed_from({"uid": f"off: running as uid {me}", "mount_ns": True, "hidden_paths": ["/srv"]}, root)
    assert sealed_from({"uid": "off", "mount_ns": True, "hidden_paths": []}, "/tmp/kt-cache")  # private /tmp
    assert not sealed_from({"uid": "off", "mount_ns": True, "hidden_paths": ["/srv/kt/ext-cachex"]}, root)
    assert not sealed_from({"uid": me, "mount_ns": "off: EPERM"}, root)  # same uid, same files: no cache


def test_tampered_entry_never_serves_another_key(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    prog_a, prog_b = "program A", "program B"
    index, payload = pack([({"material": MAT_A, "module_file": "ext_a.so"}, b"A-binary")])
    [entry] = cache.accept(prog_a, ENV, index, payload)
    assert entry.material_sha256 == _digest(MAT_A)
    bind_b = binding(prog_b, ENV)
    # Copied under program B's binding (same material): refused, deleted, A still served.
    shutil.copytree(entry.path, cache.root / bind_b / entry.material_sha256)
    assert cache.offer(prog_b, ENV) == ([], b"")
    assert not (cache.root / bind_b / entry.material_sha256).exists()
    # Manifest rewritten to claim B's binding and key, without the parent's secret: refused too.
    shutil.copytree(entry.path, cache.root / bind_b / entry.material_sha256)
    doc = json.loads((cache.root / bind_b / entry.material_sha256 / "manifest.json").read_text())
    doc["manifest"].update(binding=bind_b, key=cache_key(bind_b, entry.material_sha256))
    (cache.root / bind_b / entry.material_sha256 / "manifest.json").write_text(json.dumps(doc))
    assert cache.offer(prog_b, ENV) == ([], b"")
    index_a, payload_a = cache.offer(prog_a, ENV)
    assert [d for _, d in unpack(index_a, payload_a)] == [b"A-binary"]


def test_worker_reports_are_filed_under_its_own_program_only(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    # A worker of program A claims a digest (and a key) belonging to another material: both ignored.
    forged = {"material": MAT_A, "module_file": "ext_a.so", "material_sha256": "0" * 64,
              "key": cache_key(binding("program B", ENV), _digest(MAT_A))}
    [entry] = cache.accept("program A", ENV, *pack([(forged, b"evil")]))
    assert entry.material_sha256 == _digest(MAT_A)
    assert sorted(p.name for p in cache.root.iterdir() if not p.name.startswith(".")) == [binding("program A", ENV)]
    assert cache.offer("program B", ENV) == ([], b"")
    # Names that could escape the entry folder, and oversized or empty binaries, are refused.
    assert cache.accept("program A", ENV, *pack([({"material": MAT_A, "module_file": "../x.so"}, b"1")])) == []
    assert cache.accept("program A", ENV, *pack([({"material": MAT_A, "module_file": "e.so"}, b"")])) == []


def test_corrupted_entry_is_rebuilt_not_served(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    [entry] = cache.accept("program A", ENV, *pack([({"material": MAT_A, "module_file": "ext_a.so"}, b"good")]))
    (entry.path / "ext_a.so").write_bytes(b"bad!")
    assert cache.offer("program A", ENV) == ([], b"")  # not served ...
    assert not entry.path.exists()  # ... and gone, so the next worker compiles again
    cache.accept("program A", ENV, *pack([({"material": MAT_A, "module_file": "ext_a.so"}, b"rebuilt")]))
    assert [d for _, d in unpack(*cache.offer("program A", ENV))] == [b"rebuilt"]


def test_eviction_keeps_the_newest(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache", max_bytes=6000)
    for i in range(4):
        mat = dict(MAT_A, name=f"ext_{i}")
        [e] = cache.accept("program A", ENV, *pack([({"material": mat, "module_file": f"ext_{i}.so"}, b"x" * 2000)]))
        os.utime(e.path / "manifest.json", (1000 + i, 1000 + i))
    cache.accept("program A", ENV, *pack([({"material": dict(MAT_A, name="ext_9"), "module_file": "ext_9.so"},
                                           b"x" * 2000)]))
    names = sorted(m["module_file"] for m, _ in unpack(*cache.offer("program A", ENV)))
    assert "ext_9.so" in names and "ext_0.so" not in names and len(names) <= 2


# ---- one real build ---------------------------------------------------------------------------

LIGHT_HEADER = "#include <pybind11/pybind11.h>\n"
LIGHT_BUILD = {"no_implicit_headers": True, "with_pytorch_error_handling": False}
"""A real extension that includes pybind11 and not torch/extension.h: the same loader, cache and hook, and a
build a few times quicker (measured while the suite ran on 2 cores: 31 s against 113 s with torch's header)."""

WORKER = r'''
import functools, json, sys
from pathlib import Path
from grader.compile_cache import ExtensionHook, pack
import torch.utils.cpp_extension as ce

scratch = Path(sys.argv[1])
offer = json.loads((scratch / "offer.json").read_text())
compiles = []
real = ce.load_inline
@functools.wraps(real)
def counting(*a, **k):
    compiles.append(k.get("name"))
    return real(*a, **k)
ce.load_inline = counting  # the hook wraps whatever the loader is, so this counts real compiles
LIGHT_HEADER, LIGHT_BUILD = json.loads(sys.argv[2])
with ExtensionHook(scratch, offer, (scratch / "offer.bin").read_bytes()) as hook:
    from torch.utils.cpp_extension import load_inline
    ext = load_inline(name="kt_cache_probe", cpp_sources=LIGHT_HEADER + "int add_one(int x) { return x + 1; }",
                      functions=["add_one"], extra_cflags=["-O1"], build_directory=str(scratch / "build"),
                      **LIGHT_BUILD)
    value = ext.add_one(41)
index, payload = hook.report()
(scratch / "built.bin").write_bytes(payload)
print(json.dumps({"value": value, "compiles": compiles, "served": hook.served, "built": index}))
'''


def _worker(scratch: Path, index: list, payload: bytes) -> dict:
    scratch.mkdir()
    (scratch / "build").mkdir()
    (scratch / "offer.json").write_text(json.dumps(index))
    (scratch / "offer.bin").write_bytes(payload)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT), "HOME": str(scratch),
           "TORCH_EXTENSIONS_DIR": str(scratch / ".torch_extensions"), "MAX_JOBS": "1"}
    out = subprocess.run([sys.executable, "-c", WORKER, str(scratch), json.dumps([LIGHT_HEADER, LIGHT_BUILD])],
                         capture_output=True, text=True, env=env,
                         cwd=scratch, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("c++") is None or shutil.which("ninja") is None,
                    reason="no C++ compiler or ninja: torch cannot build extensions here")
def test_real_extension_built_once_then_served(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache")
    env = BuildEnv.local("cpu")
    program = "the candidate module text the parent sent"
    first = _worker(tmp_path / "w1", *cache.offer(program, env))
    assert first["value"] == 42 and first["compiles"] == ["kt_cache_probe"] and first["served"] == []
    stored = cache.accept(program, env, first["built"], (tmp_path / "w1" / "built.bin").read_bytes())
    assert [e.module_file for e in stored] == ["kt_cache_probe.so"]

    second = _worker(tmp_path / "w2", *cache.offer(program, env))
    assert second["value"] == 42 and second["compiles"] == [] and second["served"] == [stored[0].material_sha256]
    assert not any((tmp_path / "w2" / "build").iterdir())  # nothing was compiled there
    assert cache.offer("another program with the same extension", env) == ([], b"")

    # A corrupted binary is never offered again: the next worker would compile.
    so = stored[0].path / "kt_cache_probe.so"
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    so.write_bytes(bytes(data))
    assert cache.offer(program, env) == ([], b"")


# ---- the live protocol: a candidate graded twice through the service ---------------------------

EXT_CANDIDATE = f'''
import torch
from torch.utils.cpp_extension import load_inline

_ext = load_inline(
    name="kt_cache_softmax_probe",
    cpp_sources={LIGHT_HEADER + "double one() { return 1.0; }"!r},
    functions=["one"], extra_cflags=["-O1"], **{LIGHT_BUILD!r})


def run(x):
    e = (x - x.amax(-1, keepdim=True)).exp() * _ext.one()
    return e / e.sum(-1, keepdim=True)
'''


def _service_builds(test):
    """A test of real builds through a service: slow, and it needs a compiler and root (its workers' own uid)."""
    for mark in (pytest.mark.skipif(os.geteuid() != 0, reason="without root the worker shares the parent's uid and "
                                    "files, so the cache stays off"),
                 pytest.mark.skipif(shutil.which("c++") is None or shutil.which("ninja") is None,
                                    reason="no C++ compiler or ninja: torch cannot build extensions here"),
                 pytest.mark.slow):
        test = mark(test)
    return test



def _entries(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/*/manifest.json"))


@_service_builds
def test_service_serves_a_cached_build_to_the_same_program_only(tmp_path: Path) -> None:
    from grader.contract import GradeRequest, Status
    from grader.service import GraderService

    root = tmp_path / "ext-cache"

    def req(name: str, timeout_s: float = 400.0) -> GradeRequest:
        return GradeRequest(attempt_id=name, task_id="softmax_rows_fp32", source=EXT_CANDIDATE, language="pytorch",
                            seed=5, timeout_s=timeout_s)

    with GraderService(mode="zygote", workers=1, compile_cache=str(root)) as svc:
        assert str(root) in svc.slots[0].config["hide"]  # the cache is one of the worker's sealed paths
        first = svc.grade_one(req("first"))
        assert first.status is Status.CORRECT, first.reason
        record = dict(first.sandbox["ext_cache"])
        [compiled] = record.pop("compiled")  # what it compiled, argument by argument (compile_cache.material_summary)
        assert record == {"sealed": True, "offered": 0, "served": 0, "built": 1, "filed": 1}
        [entry] = _entries(root)
        assert compiled["*"] == entry.name[:8] and "cpp_sources" in compiled
        assert (entry / "kt_cache_softmax_probe.so").stat().st_size > 0

        second = svc.grade_one(req("second"))
        assert second.status is Status.CORRECT, second.reason
        # Served from the offer and compiled nothing: the worker's loader wrapper only reports a build
        # when torch's real loader ran, and the parent filed nothing new.
        assert second.sandbox["ext_cache"] == {"sealed": True, "offered": 1, "served": 1, "built": 0, "filed": 0,
                                               "offered_materials": [f"{entry.name[:8]}:build"]}
        assert _entries(root) == [entry]
        c1, c2 = first.phase_seconds["compile"], second.phase_seconds["compile"]
        assert c1 > 3 * c2 and c1 - c2 > 3.0, (c1, c2)

        # The same extension in another program is not offered that build.
        assert svc.ext_cache.offer(EXT_CANDIDATE + "# another program\n", svc.build_env) == ([], b"")

        # A tampered binary is never offered: the next worker starts compiling, and the short budget
        # ends that compile (this test pays for two real builds only).
        so = entry / "kt_cache_softmax_probe.so"
        data = bytearray(so.read_bytes())
        data[len(data) // 2] ^= 0xFF
        so.write_bytes(bytes(data))
        third = svc.grade_one(req("third", timeout_s=max(5.0, min(15.0, c1 / 3))))
    assert third.sandbox["ext_cache"]["offered"] == 0
    assert third.sandbox["ext_cache"].get("served", 0) == 0
    assert not entry.exists() or bytes(data) != (entry / "kt_cache_softmax_probe.so").read_bytes()
    if third.status is not Status.TIMEOUT:  # a host fast enough to rebuild within the budget
        assert third.status is Status.CORRECT and third.sandbox["ext_cache"]["built"] == 1, third.reason


def test_a_reported_material_summary_is_kept_only_as_short_plain_strings() -> None:
    from grader.compile_cache import material_summary, summaries

    good = material_summary({"api": "load_inline", "cpp_sources": ["int x;"], "extra_cflags": ["-O3"]})
    assert set(good) == {"*", "api", "cpp_sources", "extra_cflags"} and all(len(v) == 8 for v in good.values())
    assert good != material_summary({"api": "load_inline", "cpp_sources": ["int x;"], "extra_cflags": ["-O2"]})
    hostile = [good, {"*": "x" * 10_000}, {"k" * 100: "abcdefgh"}, "not a dict",
               {str(i): "abcdefgh" for i in range(99)}, good, good]
    assert summaries(hostile) == [good, {}, {}]  # three at most, each key and value bounded
    assert summaries("nope") == [] and summaries(None) == []


def test_a_build_that_raises_is_recorded_with_its_last_lines(tmp_path: Path, monkeypatch) -> None:
    """A candidate may catch its own failed build and fall back to the library (H200 run 23: 17 of 18 CUDA-L1
    builds did, then were floored by the own-kernel rule): the hook keeps the error's tail for the grade."""
    from torch.utils import cpp_extension as ce

    from grader.compile_cache import ExtensionHook

    def broken_load_inline(name, cpp_sources, cuda_sources=None, functions=None, verbose=False):
        raise RuntimeError("Error building extension 'bad':\nbad.cu(3): error: identifier \"undeclared\" is undefined\n"
                           + "/usr/local/cuda/bin/nvcc -c bad.cu -o bad.cuda.o " * 20 + "\nninja: build stopped")

    monkeypatch.setattr(ce, "load_inline", broken_load_inline)
    hook = ExtensionHook(tmp_path)
    with hook:
        with pytest.raises(RuntimeError):
            ce.load_inline(name="bad", cpp_sources="", functions=["forward"])
    assert len(hook.failed) == 1 and "identifier \"undeclared\" is undefined" in hook.failed[0]
    # the compiler's verdict, printed before a long failed command line, is what the record keeps
    assert "ninja: build stopped" in hook.failed[0] and "nvcc -c" not in hook.failed[0]
    assert ce.load_inline is broken_load_inline  # the loader is torch's (here: the test's) again


# ---- failures kept: a build the compiler refused is refused again without compiling -------------------------

COMPILER_SAID = ("RuntimeError: Error building extension 'ext_a': [1/2] c++ -c main.cpp -o main.o\nFAILED: main.o\n"
                 "main.cpp:77:1: error: redefinition of 'int pybind11_exec_ext_a(PyObject*)'\nninja: build stopped")


def test_only_the_compilers_verdict_on_the_sources_is_a_conclusive_failure() -> None:
    from grader.compile_cache import conclusive_failure

    assert conclusive_failure(COMPILER_SAID)
    assert conclusive_failure("cuda.cu(185): error: no suitable conversion function exists\n1 error detected")
    assert conclusive_failure("main.cpp:57:64: error: expected primary-expression before '>' token")
    # the host's failures, which another try may not repeat, and failures that name no verdict
    assert not conclusive_failure("c++: fatal error: Killed signal terminated program cc1plus")
    assert not conclusive_failure(COMPILER_SAID + "\nmain.cpp: virtual memory exhausted: Cannot allocate memory")
    assert not conclusive_failure("RuntimeError: Error building extension 'ext_a'\nninja: build stopped")
    assert not conclusive_failure("subprocess.TimeoutExpired: Command timed out after 600 seconds")
    assert not conclusive_failure("RuntimeError: CUDA error: no CUDA-capable device is detected")


def test_a_failure_is_filed_for_its_own_program_and_raised_again_there_without_compiling(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    from torch.utils import cpp_extension as ce

    from grader.compile_cache import FAILURE_FILE, ExtensionHook

    compiles = []

    def refusing_load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                             verbose=False, build_directory=None):
        compiles.append(name)
        raise RuntimeError(COMPILER_SAID.removeprefix("RuntimeError: "))

    monkeypatch.setattr(ce, "load_inline", refusing_load_inline)
    cache = CompileCache(tmp_path / "cache")
    call = {"name": "ext_a", "cpp_sources": "int f(){return 1;}", "functions": ["f"], "extra_cflags": ["-O3"]}
    with ExtensionHook(tmp_path / "w1") as first:
        with pytest.raises(RuntimeError):
            ce.load_inline(**call)
    [entry] = cache.accept("program A", ENV, *first.report())
    assert entry.failure and compiles == ["ext_a"]
    assert "redefinition of 'int pybind11_exec_ext_a" in (entry.path / FAILURE_FILE).read_text()

    with ExtensionHook(tmp_path / "w2", *cache.offer("program A", ENV)) as second:
        with pytest.raises(RuntimeError, match="failed to build before.*redefinition"):
            ce.load_inline(**call)
        with pytest.raises(RuntimeError):  # other flags are another build: compiled (and refused) for real
            ce.load_inline(**dict(call, extra_cflags=["-O0"]))
    assert second.replayed == [entry.material_sha256] and compiles == ["ext_a", "ext_a"]
    assert "redefinition" in second.failed[0]  # the grade's record says why, as for a build that ran
    # another program with the same extension is not told of it, and an edited failure is never raised
    assert cache.offer("program B", ENV) == ([], b"")
    (entry.path / FAILURE_FILE).write_text(COMPILER_SAID.replace("redefinition", "anything"))
    assert cache.offer("program A", ENV) == ([], b"")


def test_a_failure_is_raised_again_though_the_loader_extended_the_flags_it_was_given(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """torch's loaders append their own flags to the `extra_ldflags` list they are given (`_prepare_ldflags`), in
    place: the material a build is filed under is the call's as made, so the same call finds it (H100 run 125: a
    CUDA-L1 attempt that links cuBLAS compiled again in its slot, its failure filed under the extended flags)."""
    from torch.utils import cpp_extension as ce

    from grader.compile_cache import ExtensionHook

    compiles = []

    def extending_load_inline(name, cpp_sources, functions=None, with_cuda=None, extra_ldflags=None, verbose=False):
        compiles.append(name)
        extra_ldflags.append("-ltorch")  # as torch's `_prepare_ldflags` does, in place
        raise RuntimeError(COMPILER_SAID.removeprefix("RuntimeError: "))

    monkeypatch.setattr(ce, "load_inline", extending_load_inline)
    cache = CompileCache(tmp_path / "cache")

    def call() -> dict:  # a module's literal: fresh lists at every call
        return {"name": "ext_a", "cpp_sources": "int f(){return 1;}", "functions": ["f"], "with_cuda": True,
                "extra_ldflags": ["-lcublas"]}

    with ExtensionHook(tmp_path / "w1") as first:
        with pytest.raises(RuntimeError):
            ce.load_inline(**call())
    [entry] = cache.accept("program A", ENV, *first.report())
    assert entry.material_sha256.startswith(first.compiled[0]["*"]), (entry.material_sha256, first.compiled)
    with ExtensionHook(tmp_path / "w2", *cache.offer("program A", ENV)) as second:
        with pytest.raises(RuntimeError, match="failed to build before"):
            ce.load_inline(**call())
    assert second.replayed == [entry.material_sha256] and compiles == ["ext_a"]


def test_a_failure_without_the_compilers_verdict_is_never_filed(tmp_path: Path) -> None:
    from grader.compile_cache import FAILURE_FILE

    cache = CompileCache(tmp_path / "cache")
    killed = b"c++: fatal error: Killed signal terminated program cc1plus"
    assert cache.accept("program A", ENV, *pack([({"material": MAT_A, "module_file": FAILURE_FILE}, killed)])) == []
    huge = b"main.cpp:1:1: error: x\n" * 1000
    assert cache.accept("program A", ENV, *pack([({"material": MAT_A, "module_file": FAILURE_FILE}, huge)])) == []


# ---- builds ahead of the grade (grader.buildahead) ----------------------------------------------------------

@_service_builds
def test_service_builds_ahead_off_the_slot_and_the_grades_compile_nothing(tmp_path: Path) -> None:
    """A builder compiles each extension module while the one slot grades the module that builds nothing; each
    grade is then served the binary, or the compiler's verdict raised again, and compiles nothing itself."""
    from grader.contract import GradeRequest, Reason, Status
    from grader.service import GraderService

    sources = {"builds": EXT_CANDIDATE.replace("kt_cache_softmax_probe", "kt_ahead_probe"),
               "refused": EXT_CANDIDATE.replace("kt_cache_softmax_probe", "kt_ahead_refused")
                                        .replace("return 1.0; }", "return 1.0 }"),
               "plain": "def run(x):\n    e = (x - x.amax(-1, keepdim=True)).exp()\n"
                        "    return e / e.sum(-1, keepdim=True)\n"}
    reqs = [GradeRequest(attempt_id=name, task_id="softmax_rows_fp32", source=src, language="pytorch",
                         timeout_s=400.0) for name, src in sources.items()]
    with GraderService(mode="zygote", workers=1, compile_cache=str(tmp_path / "ext-cache"), build_ahead=1) as svc:
        results = list(svc.grade(reqs))
        again = list(svc.grade([dataclasses.replace(r, attempt_id=r.attempt_id + " again") for r in reqs[:2]]))
    by = {r.attempt_id: r for r in results + again}
    assert results[0].attempt_id == "plain"  # the slot did not wait for a compiler
    assert "ahead" not in by["plain"].sandbox.get("ext_cache", {})

    built = by["builds"]
    assert built.status is Status.CORRECT, built.reason
    cache = built.sandbox["ext_cache"]
    assert cache["ahead"]["outcome"] == "built" and cache["ahead"]["built"] == 1, cache
    assert (cache["offered"], cache["served"], cache["built"], cache["filed"]) == (1, 1, 0, 0), cache

    refused = by["refused"]
    assert refused.status is Status.COMPILE_ERROR and refused.reason_code is Reason.COMPILE, refused.reason
    assert "failed to build before" in refused.reason and "error: expected" in refused.reason, refused.reason
    cache = refused.sandbox["ext_cache"]
    assert cache["ahead"]["outcome"] == "failed" and cache["ahead"]["failed"] == 1, cache
    assert (cache["offered"], cache["replayed"], cache["built"]) == (1, 1, 0), cache
    # a second round: the builder is offered the first one's build and failure, compiles nothing, files nothing
    for name, outcome in (("builds again", "served"), ("refused again", "replayed")):
        cache = by[name].sandbox["ext_cache"]
        assert cache["ahead"]["outcome"] == "in the cache already", cache
        assert cache[outcome] == 1 and cache["built"] == 0, cache


@_service_builds
def test_a_builder_reaches_a_loader_that_only_runs_where_torch_sees_a_device(tmp_path: Path) -> None:
    """CUDA-L1 modules build inside `if torch.cuda.is_available():` (H200 run 62: two of nine, in their models'
    constructors, filed nothing ahead and compiled in their slots for 28 and 70 s). The builder has no device and
    says it has one: the build runs (here it is refused by the compiler, quickly), and its failure is filed."""
    from grader.buildahead import build

    guarded = ("import torch\nfrom torch.utils.cpp_extension import load_inline\nprint('no newline', end='')\n\n"
               "class Model:\n"
               "    def __init__(self):\n        if torch.cuda.is_available():\n"
               f"            self.ext = load_inline(name='kt_guarded', cpp_sources={LIGHT_HEADER + 'int f( {'!r}, "
               f"functions=['f'], **{LIGHT_BUILD!r})\n\nmodel = Model()\n")
    cache = CompileCache(tmp_path / "cache")
    record = build(guarded, cache, ENV, 300)
    assert record["outcome"] == "failed" and record["failed"] == 1, record
    [(meta, text)] = unpack(*cache.offer(guarded, ENV))
    assert b"error" in text and meta["module_file"] == "failure.txt"
