"""Parent-side management of worker processes: one slot = one zygote (or fresh launcher) + one uid.

A slot hands out one fresh worker per attempt and tears it down afterwards: the worker's process
group and every process left under the slot's uid are killed, and the exit status is collected.
"""
from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from grader import sandbox, timing, wire, zygote

UID_BASE = 61000
UID_COUNT = 1000
_UID_LOCKS = "/tmp/kerneltraj-uids"


def claim_uid() -> tuple[int, int]:
    """A worker uid no other slot on this host holds (several services may run at once).

    The claim is an exclusive flock on a per-uid file, held for the slot's life and released by
    the kernel if the process dies, so a crashed service never leaks its uids.
    """
    import fcntl

    os.makedirs(_UID_LOCKS, mode=0o700, exist_ok=True)
    for uid in range(UID_BASE, UID_BASE + UID_COUNT):
        fd = os.open(os.path.join(_UID_LOCKS, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        if sandbox.uid_pids(uid):  # a process of this uid survived its slot: clear it before reuse
            sandbox.kill_uid(uid)
        return uid, fd
    raise RuntimeError(f"all {UID_COUNT} worker uids are in use on this host")
_REPO = Path(__file__).resolve().parent.parent


AUDIT_DRAIN_CAP = 1 << 20
"""Bytes `WorkerConn.drain_audit` reads from an audit channel at most in one call (the channel's lines are about 100
bytes each, and one floors a candidate)."""


@dataclass
class WorkerConn:
    """A live worker for one attempt."""

    sock: socket.socket
    audit: socket.socket
    pid: int
    hello: dict = field(default_factory=dict)
    popen: subprocess.Popen | None = None
    audit_lines: list[str] = field(default_factory=list)
    baseline_threads: int = 0
    audit_target: str | None = None
    """What the worker's audit descriptor referred to at hello (the channel's socket)."""
    arena: wire.Arena | None = None
    """The buffer a reference worker writes its answers into (lent with its first load)."""
    gate: wire.GateWord | None = None
    """The word a timing worker's launch gate waits on (lent right after its hello, `Slot.spawn`)."""
    out_arena: wire.Arena | None = None
    """The slot's arena a candidate worker copies its fetched outputs into (`Slot.lend_output_arena`); the slot's,
    so it outlives the worker."""
    uid: int | None = None
    """The uid it runs under (a slot's candidates alternate between two: `Slot.spawn`)."""
    spare: bool = False
    """Started as a spare, while the slot's last candidate was being graded (`Slot.spawn`)."""
    trimmed: str | None = None
    """The size it last gave its cached device memory back for (`session._trim`)."""
    answered: str | None = None
    """The size of a reference worker's last answer (`session._gates_answer`)."""
    role: str = "candidate"
    """What it was started as (`Slot._spawn`): "candidate", "expert", "reference", or "task" (both of the last two in
    one worker, `Slot.task`)."""
    gate_stalled: bool = False
    """A reference worker's gated answer waited for the device behind its gate: no more are gated."""
    warmed: set = field(default_factory=set)
    """The sizes an expert's worker has been called at (`session._expert_warmup`): its first call at one compiles."""
    planted: int = 0
    """The files of its expert's compiled kernels written into its Triton cache as it started (`Slot._plant`)."""
    awaited: bool = False
    """A message sent by `begin` whose reply has not been read yet: nothing else may be asked of the worker."""

    def request(self, msg: dict, timeout_s: float, payload: bytes = b"", fd: int | None = None,
                window=None, patience_s: float = timing.GATE_PATIENCE_S, whole: bool = False,
                read_whole: bool = False, released=None, quiet=None) -> tuple[dict, bytes, float]:
        """Send one message (with an optional raw payload, or a descriptor to lend) and wait for its reply;
        returns (reply, payload, parent_ms). A gated call is let through its gate in two windows when `window`
        is given (grader.devicelock): `window("draw")` from its message to the worker's "drawn" (its untimed
        device work is done and its gate closed), `window("device")` from the gate's opening to "done" (the
        device is this call's alone). Between the two it launches behind its closed gate, in no window; its
        reply is read after both. `patience_s`: how long its launch may take before the parent opens its gate
        anyway (`_let_through`). `whole`: one `window("device")` from the message to "done" instead, as before
        grader 0.13.0 (no other worker's gate is closed meanwhile). `read_whole`: its reply is read inside the
        window of its opening, not after it, so what the worker does after "done" (its second synchronise, the
        interpreter's check) is over before that window is given back, as a timed pair's candidate's is
        (`let_through_together`). A call asked to be gated of a worker that has no gate is one `window("device")`,
        message to reply. `released()`: a window held from the message to the worker's "released" (`released` in
        the message, `Effort.traced_release`: its call is over and the device synchronised), its reply read after.
        `quiet(sock)`: called before an ungated call's reply is read, to wait for it (`session._quiet`,
        `Effort.hang_watch`)."""
        if self.awaited:  # its reply would be read as this message's
            raise wire.WireError(f"asked {msg.get('op')!r} while the reply to an earlier message was still awaited")
        self.sock.settimeout(max(timeout_s, 0.001))
        cap = wire.REPLY_PAYLOAD_CAP.get(msg.get("op"), 0)
        gated = bool(msg.get("gated")) and self.gate is not None
        t0 = time.perf_counter_ns()
        ended, gate_record = None, {}
        with released() if released is not None else contextlib.nullcontext():
            if gated:
                if whole and window is not None:
                    with window("device"):
                        ended, gate_record = self._gated(msg, payload, fd, cap, None, patience_s)
                else:
                    ended, gate_record = self._gated(msg, payload, fd, cap, window, patience_s, read_whole)
            elif msg.get("gated") and window is not None:
                with window("device"):
                    self._send(msg, payload, fd)
                    ended = wire.recv(self.sock, cap)
            else:
                self._send(msg, payload, fd)
            if released is not None and ended is None:
                ended = self._frame_or_reply(cap, "released")
        if gated:
            reply, payload = self._reply_after(cap, ended, gate_record)
        elif ended is not None:
            reply, payload = ended
        else:
            if quiet is not None:  # it may take what it likes of the request's timeout, and no more
                quiet(self.sock)
            reply, payload = self._recv_left(cap, timeout_s, t0)
        return reply, payload, (time.perf_counter_ns() - t0) / 1e6

    def _recv_left(self, cap: int, timeout_s: float, t0: int) -> tuple[dict, bytes]:
        """The reply to a message sent at `t0` (`perf_counter_ns`), read in what is left of its `timeout_s`."""
        self.sock.settimeout(max(timeout_s - (time.perf_counter_ns() - t0) / 1e9, 0.001))
        return wire.recv(self.sock, cap)

    def begin(self, msg: dict, timeout_s: float) -> Callable[[], tuple[dict, bytes, float]]:
        """Send an ungated message now and read its reply later (`session._expert_early`): the function returned reads
        it, in what is left of `timeout_s`, and (as `request`) returns (reply, payload, parent_ms). Until it has been
        called the worker is asked nothing else (`request` refuses)."""
        if msg.get("gated"):
            raise ValueError("a gated call is let through its gate as it runs: `request` it")
        cap = wire.REPLY_PAYLOAD_CAP.get(msg.get("op"), 0)
        t0 = time.perf_counter_ns()
        self._send(msg, b"", None)
        self.awaited = True

        def reply() -> tuple[dict, bytes, float]:
            try:
                got, payload = self._recv_left(cap, timeout_s, t0)
            finally:  # read, or the channel is broken and its worker is ended (`session._expert_reply`)
                self.awaited = False
            return got, payload, (time.perf_counter_ns() - t0) / 1e6

        return reply

    def _send(self, msg: dict, payload: bytes, fd: int | None) -> None:
        if fd is not None:
            wire.send_fd(self.sock, msg, fd)
        else:
            wire.send(self.sock, msg, payload)

    def _gated(self, msg: dict, payload: bytes, fd: int | None, cap: int, window, patience_s: float,
               read_whole: bool = False) -> tuple[tuple[dict, bytes] | None, dict]:
        """The parent's side of a gated call: send it inside its draw window and wait for "drawn", then let it
        through its gate (`_let_through`) inside its device window. A call that draws its inputs behind its gate
        (`fill_behind` in its message: it does no device work before "drawn") takes no draw window. Returns (the
        reply, when the call ended without reaching "done": an error; else None) and what the reply gains
        (`_through`); `read_whole`: the reply itself, read inside the window of the gate's opening."""
        no_window = contextlib.nullcontext
        device_window = (lambda: window("device")) if window is not None else no_window
        draws = window is not None and not msg.get("fill_behind")
        with window("draw") if draws else no_window():
            held = self._hold_at_gate(msg, payload, fd, cap)
            if held.first is not None:  # its gate would not close: the call runs whole in this draw window, or
                # (drawing behind its gate) in a device window from here
                return self._let_through(cap, held, no_window if draws else device_window, patience_s, read_whole)
        if held.ended is not None:
            return held.ended, {}
        return self._let_through(cap, held, device_window, patience_s, read_whole)

    def _hold_at_gate(self, msg: dict, payload: bytes, fd: int | None, cap: int) -> "_AtGate":
        """Send a gated call and read its first frame: "drawn" (its gate is closed), "queued" (its gate would not
        close: it may run from now on), or its reply (it failed first: its gate is opened, nothing is held)."""
        frames = wire.GATE_FRAMES
        t_sent = time.perf_counter_ns()
        self._send(msg, payload, fd)
        first, blob = wire.recv(self.sock, cap)
        if first == frames["queued"]:
            return _AtGate(first=first, t_open=t_sent)
        if first.get("gate") is not None and first != frames["drawn"]:
            raise wire.FrameError(f"a {first['gate']!r} frame before the call's gate was closed")
        if first != frames["drawn"]:  # answered without closing its gate (it failed first): nothing to time
            self.gate.open()
            return _AtGate(ended=(first, blob))
        return _AtGate()

    def _await_queued(self, cap: int, held: "_AtGate", patience_s: float) -> None:
        """Once the call's gate is closed, wait for its "queued", at most `patience_s` (a call that waits for the
        device says nothing until the gate opens); a reply instead (it failed first) ends it, its gate opened."""
        frames = wire.GATE_FRAMES
        if held.first is None and select.select([self.sock], [], [], patience_s)[0]:
            first, blob = wire.recv(self.sock, cap)
            if first.get("gate") is not None and first != frames["queued"]:
                raise wire.FrameError(f"a {first['gate']!r} frame before the call was queued")
            if first != frames["queued"]:  # answered without queuing a call (it failed first): nothing to time
                self.gate.open()
                held.ended = (first, blob)
                return
            held.first = first

    def _let_through(self, cap: int, held: "_AtGate", device_window, patience_s: float, read_whole: bool = False
                     ) -> tuple[tuple[dict, bytes] | None, dict]:
        """Wait for the call's "queued" (`_await_queued`), then take the device window and let it through
        (`_through`), and with `read_whole` read its reply there too. Returns as `_gated`."""
        self._await_queued(cap, held, patience_s)
        if held.ended is not None:
            return held.ended, {}
        with device_window():
            ended, record = self._through(cap, held)
            if read_whole and ended is None:
                return self._reply_after(cap, None, record), {}
            return ended, record

    def _through(self, cap: int, held: "_AtGate") -> tuple[tuple[dict, bytes] | None, dict]:
        """Inside the call's device window: open its gate and wait for "done". Returns as `_gated`, and what the
        reply gains: `stalled` (the gate was opened before the call said it was queued, or it never closed),
        `window_ms` (the parent's clock from the opening to "done": the call's device interval and its gap lie
        inside it) and `window_ns` (the opening and "done" on that clock)."""
        frames = wire.GATE_FRAMES
        stalled = held.first is None or held.t_open is not None
        t_open = time.perf_counter_ns() if held.t_open is None else held.t_open
        self.gate.open()
        frame, blob = wire.recv(self.sock, cap)
        # Silent past the patience: queued now the device let it finish launching. Its gate closed before
        # "drawn", so this opening cannot be lost to a later close (as H200 run 42's was).
        if held.first is None and frame == frames["queued"]:
            frame, blob = wire.recv(self.sock, cap)
        t_done = time.perf_counter_ns()
        if frame.get("gate") is not None and frame != frames["done"]:
            raise wire.FrameError(f"a {frame['gate']!r} frame out of turn in a gated call")
        if frame != frames["done"]:  # the call ended without reaching the device's end (an error): its reply
            return ({**frame, "stalled": stalled}, blob), {}
        return None, {"stalled": stalled, "window_ms": (t_done - t_open) / 1e6, "window_ns": [t_open, t_done]}

    def _frame_or_reply(self, cap: int, stage: str) -> tuple[dict, bytes] | None:
        """Where its message asked the worker for a `stage` frame ("settled", `Effort.settled_pairs`, after a gated
        call's "done"; "released", `Effort.traced_release`, after any call's end): read it (what the call's thread
        queued as it ended is done too; its reply follows), None. A worker that failed first replies instead: that
        reply. Any other frame is forged."""
        frame, blob = wire.recv(self.sock, cap)
        if frame == wire.GATE_FRAMES[stage]:
            return None
        if frame.get("gate") is not None:
            raise wire.FrameError(f"a {frame['gate']!r} frame where a call's {stage!r} was due")
        return frame, blob

    def _reply_after(self, cap: int, ended: tuple[dict, bytes] | None, record: dict) -> tuple[dict, bytes]:
        """A gated call's reply, once "done" (or its error reply, `ended`), with what its gate's record adds."""
        if ended is not None:
            return ended
        reply, payload = wire.recv(self.sock, cap)
        if reply.get("gate") is not None:
            raise wire.FrameError(f"a second {reply['gate']!r} frame in one gated call")
        reply.update(record)
        return reply, payload

    def answer_audit_mark(self) -> int:
        """Where the audit lines that judge the reference's next load, answer or task inputs begin: a reference worker's
        every line; a task's one worker's (`Slot.task`) from here, its expert's lines before being drained and not
        judged, as an expert worker's are."""
        return len(self.drain_audit()) if self.role == "task" else 0

    def drain_audit(self) -> list[str]:
        """Every line the worker's audit channel has carried, read now, at most `AUDIT_DRAIN_CAP` bytes a call: any line
        floors a candidate's grade, so a candidate that writes to its channel faster than it is read (a reach in a
        loop, on a thread of its own) cannot hold the parent here; what is left is read by the next call, or ends with
        the worker."""
        taken = 0
        while taken < AUDIT_DRAIN_CAP:
            r, _, _ = select.select([self.audit], [], [], 0)
            if not r:
                break
            data = self.audit.recv(1 << 16)
            if not data:
                break
            taken += len(data)
            self.audit_lines.extend(line for line in data.decode("utf-8", "replace").splitlines() if line)
        return self.audit_lines


@dataclass
class _AtGate:
    """Where a gated call stands once sent (`WorkerConn._hold_at_gate`)."""

    first: dict | None = None
    """Its "queued" frame, once read."""
    t_open: int | None = None
    """Since when it may have run (its gate would not close): it is stalled."""
    ended: tuple[dict, bytes] | None = None
    """Its reply, when it ended before reaching the device (it failed first)."""


@dataclass
class GatedCall:
    """One call of `let_through_together`: a gated message that draws its inputs behind its gate (`fill_behind`)."""

    conn: WorkerConn
    msg: dict
    fd: int | None = None


def let_through_together(calls: list[GatedCall], timeout_s: float, window,
                         patience_s: float = timing.GATE_PATIENCE_S) -> list[tuple[dict, bytes, float] | Exception]:
    """Gated calls of several workers let through one after another in one device window (`window("device")`),
    in the order given: a timing loop's pair (`Effort.paired_windows`), whose two calls otherwise waited for a
    window each. Every call is sent first and each worker queues its own behind its closed gate, all at once; then,
    inside the window, each gate but the first is opened only once the call before it has replied whole: whatever
    that worker does after "done" (its code's thread ending, the interpreter's check, a synchronise of the whole
    device before it replies) is over before another call is timed beside it, so the device is each call's alone in
    turn, as in a window of its own. A call whose message asks for it (`settled`, `Effort.settled_pairs`) is read
    only to its "settled" there: its thread has ended and the device is synchronised again, and its interpreter's
    check runs beside the next call (a change it finds floors the attempt whose call it was); its reply is read after
    the window. Returns, per call, (reply, payload, parent ms) as `WorkerConn.request`, or the
    exception its worker's channel raised: the other calls are let through and answered all the same, so no worker
    is left with a call in flight."""
    out: list = [None] * len(calls)
    held: list[_AtGate | None] = [None] * len(calls)
    records: list[dict] = [{} for _ in calls]
    caps = [wire.REPLY_PAYLOAD_CAP.get(c.msg.get("op"), 0) for c in calls]
    t0, t_end = [0] * len(calls), [0] * len(calls)
    for i, c in enumerate(calls):
        if not (c.msg.get("gated") and c.msg.get("fill_behind") and c.conn.gate is not None):
            raise ValueError("let_through_together takes gated calls that draw behind their gates")
        c.conn.sock.settimeout(max(timeout_s, 0.001))
        t0[i] = time.perf_counter_ns()
        try:
            held[i] = c.conn._hold_at_gate(c.msg, b"", c.fd, caps[i])
        except (OSError, wire.WireError) as e:
            out[i] = e
    for i, c in enumerate(calls):
        if out[i] is None:
            try:
                c.conn._await_queued(caps[i], held[i], patience_s)
            except (OSError, wire.WireError) as e:
                out[i] = e
    live = [i for i in range(len(calls)) if out[i] is None and held[i].ended is None]
    if live:
        with window("device"):
            for i in live:
                c = calls[i]
                try:
                    ended, records[i] = c.conn._through(caps[i], held[i])
                    if ended is not None:
                        held[i].ended = ended
                    elif i != live[-1] and c.msg.get("settled") is True:  # to its "settled" before the next gate
                        held[i].ended = c.conn._frame_or_reply(caps[i], "settled")  # opens; its reply after the window
                    elif i != live[-1]:  # read whole before the next gate opens
                        held[i].ended = c.conn._reply_after(caps[i], None, records[i])
                        t_end[i] = time.perf_counter_ns()
                except (OSError, wire.WireError) as e:
                    out[i] = e
    for i, c in enumerate(calls):
        if out[i] is None:
            try:
                reply, payload = c.conn._reply_after(caps[i], held[i].ended, records[i])
                out[i] = (reply, payload, ((t_end[i] or time.perf_counter_ns()) - t0[i]) / 1e6)
            except (OSError, wire.WireError) as e:
                out[i] = e
    return out


# Top-level directories a worker keeps: the system it runs on. Every other one (a data disk, another
# checkout of this project, a home, a mounted share, /run's secrets, /var's sockets) is covered, so
# no copy of the catalogue anywhere on the host can be read, whatever call reads it.
SYSTEM_DIRS = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev", "proc", "sys",
                         "tmp"})


def sealed_paths(extra: list[str] | None = None) -> list[str]:
    """Directories a worker must not see: the catalogue, the checkout, every non-system top-level
    directory, and extras."""
    import grader.catalogue as cat

    paths = [os.path.dirname(cat.__file__), str(_REPO), "/root", "/home"]
    paths += [os.path.join("/", name) for name in _listdir("/") if name not in SYSTEM_DIRS
              and not os.path.islink(os.path.join("/", name))]
    for p in extra or []:
        p = os.path.realpath(p)
        paths.append(p if os.path.isdir(p) else os.path.dirname(p))
    return [p for p in dict.fromkeys(paths) if os.path.isdir(p)]


def revealed_paths() -> list[str]:
    """Paths the worker needs even when they lie inside a hidden directory: the interpreter, its
    packages, and the CUDA toolkit and libraries the environment names."""
    keep = [sys.prefix, sys.base_prefix] + [p for p in sys.path if p and "site-packages" in p]
    keep += [os.environ.get("CUDA_HOME") or ""] + os.environ.get("LD_LIBRARY_PATH", "").split(":")
    if os.environ.get("TRITON_PTXAS_PATH"):
        keep.append(os.path.dirname(os.environ["TRITON_PTXAS_PATH"]))
    real = {os.path.realpath(p) for p in keep if p and os.path.isdir(p)}
    return sorted(p for p in real if p != "/" and not any(p.startswith(q.rstrip("/") + "/") for q in real))


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def base_env(device: str) -> dict:
    """The scrubbed environment a worker starts from: nothing of the caller's but the essentials."""
    cuda_home = os.environ.get("CUDA_HOME") or ("/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None)
    env = {"PATH": (f"{cuda_home}/bin:" if cuda_home else "") + os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
           "PYTHONPATH": str(_REPO), "OMP_NUM_THREADS": "1",
           "KINETO_LOG_LEVEL": "5",
           # A worker must not cache bytecode beside sources it imports lazily (site-packages):
           # outside its scratch, so the audit hook floors it. grader.zygote sets the flag too.
           "PYTHONDONTWRITEBYTECODE": "1"}
    if cuda_home:
        env["CUDA_HOME"] = cuda_home
    for k in ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TRITON_PTXAS_PATH", "TORCH_CUDA_ARCH_LIST", "NCCL_NVLS_ENABLE",
              "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        if k in os.environ:
            env[k] = os.environ[k]
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    return env


def slot_cpus(index: int, slots: int) -> list[int] | None:
    """The core a slot's workers (the candidate and its expert twin) run on, or None to leave them
    unpinned. Both wait for the device in turn, so one core serves them; sharing it, they wake from
    a device-wide synchronise alike, while another slot's compile or the parent's work runs
    elsewhere (on an H200 the gap after that synchronise differed by 5-30 us between two unpinned
    workers). The highest cores go to the slots; the lower ones keep the parent and the zygotes. With `twin_apart`
    only the candidate runs here (`worker_cpus`)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < slots + 2:  # too few to give each slot its own and keep some for the rest
        return None
    return [cores[-1 - index]]


def worker_cpus(index: int, slots: int, role: str, *, spare: bool = False, aside: bool = False,
                twin_apart: bool = False) -> list[int] | None:
    """The cores a slot's new worker is pinned to (None: unpinned). A candidate runs on its slot's own core
    (`slot_cpus`); a spare, or a kept worker started aside, boots on the cores no slot is given (`spare_cpus`). A kept
    worker (a task's, an expert's or a reference's) runs on its slot's core beside the candidate, or, with
    `twin_apart`, on the cores no slot is given: with `settled_pairs` the twin's gate opens while the candidate's
    worker checks its interpreter, and on a shared core the twin waits for that check to yield the core before it
    sees its gate open, its device window held meanwhile (the twin's "to the gate seen open" 2.3-3.0 ms in every run
    since grader 0.20.0, 0.03-0.06 ms before it, H100 runs 102-134)."""
    if spare or aside or (twin_apart and role != "candidate"):
        return spare_cpus(slots)
    return slot_cpus(index, slots)


def spare_cpus(slots: int) -> list[int] | None:
    """The cores a spare worker boots on (`Slot.spawn`): those no slot is given, where the parent and the zygotes
    run, so that no spare's start-up takes a core from a slot's candidate or twin while they are timed. None where
    slots are not pinned (`slot_cpus`)."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[:len(cores) - slots] if len(cores) >= slots + 2 else None


def pin_threads(pid: int, cpus: list[int]) -> None:
    """Move every thread of process `pid` onto `cpus` (a spare taken into its slot: threads keep the cores they
    were made with, and the threads it makes later inherit its main thread's)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), cpus)


UID_ROLE = {"task": "expert"}
"""The uid a kept role runs under, where it is not the role's own: a task's one worker (`Slot.task`) holds its expert
twin, so it runs under the expert's uid, which no candidate shares."""

KEPT_WEIGHT = {"task": 2}
"""How many of the slot's kept workers (`Slot.max_kept`) a kept role counts for: a task's one worker holds what its
expert's and reference's workers held (less a device context), so a slot keeps as many tasks either way."""


def _kept_key(name: str) -> str:
    """The task key of a kept worker's name (`role:key`, `Slot._keep`)."""
    return name.split(":", 1)[1]


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning)\b:?")


def error_line(text: str) -> str:
    """The line of a worker's error text that names it: the last unindented line that starts with an exception's
    name (`torch.AcceleratorError: CUDA error: out of memory`), not the advice a CUDA error ends with ("Compile with
    `TORCH_USE_CUDA_DSA` to enable device-side assertions.", all H100 runs 100 and 101 said of the expert workers
    that failed); the last line where none does."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    named = [ln for ln in lines if not ln[:1].isspace() and _EXCEPTION_LINE.match(ln)]
    return (named or lines or ["no detail"])[-1]


class Slot:
    """One worker slot: a zygote (or the fresh-process launcher) and its own unprivileged uid."""

    def __init__(self, index: int, mode: str, device: str, hide: list[str], *, reveal: list[str] = (), tmp_mb: int = 1024,
                 address_space_mb: int | None = None, boot_timeout_s: float = 180.0, defer_ready: bool = False,
                 slots: int = 1, reference_arena: bool = True, own_root: bool = True, launch_gate: bool = True,
                 output_arena: bool = True, spares: bool = False, kept_tasks: int = 2, task_workers: bool = False,
                 triton_key_once: bool = False, twin_apart: bool = False):
        if mode not in ("zygote", "fresh"):
            raise ValueError(f"unknown worker mode {mode!r}; use 'zygote' or 'fresh'")
        self.index, self.mode, self.device = index, mode, device
        self.slots = slots
        """How many slots share the device (each one's fair share of its memory, `session.oom_floor`)."""
        self.uid, self._uid_lock = claim_uid() if os.geteuid() == 0 else (None, None)
        # The expert's workers run under a uid of their own: a candidate can neither signal nor
        # trace the process that its reward is measured against. The task references (corpus code)
        # get a third: a hostile reference can reach neither the expert nor a candidate.
        self.expert_uid, self._expert_uid_lock = claim_uid() if os.geteuid() == 0 else (None, None)
        self.reference_uid, self._reference_uid_lock = claim_uid() if os.geteuid() == 0 else (None, None)
        # Spares (`spawn`): the next candidate's worker starts while this one is graded, under a second candidate
        # uid, so the two never share one: a candidate can signal, trace or crowd (RLIMIT_NPROC) no process of the
        # next attempt's, and the sweep of its uid when it is finished (`finish`) leaves the spare alone. Without
        # root there are no uids to keep them apart, so no spares.
        self.spares = spares and os.geteuid() == 0
        self.spare_uid, self._spare_uid_lock = claim_uid() if self.spares else (None, None)
        self._spare: tuple[threading.Thread, list, int | None] | None = None  # its thread, its result, its limit
        self._ctl_lock = threading.Lock()  # the zygote answers one request at a time; a spare starts on a thread
        self._closing = False
        self._kept: dict[str, WorkerConn] = {}
        self.twin_apart = twin_apart
        """The slot's kept workers run on the cores no slot is given, not on its candidate's (`worker_cpus`)."""
        self.task_workers = task_workers
        """One kept worker a task serves as its expert twin and its reference both (`task`), for the tasks whose expert
        and reference come from one author (`session.SealedTask.one_author`); the service's `task_workers` (on by
        default since grader 0.21.0)."""
        self.max_kept = 2 * max(1, kept_tasks)
        """Expert and reference workers kept (`_kept_or_started`): those of the `kept_tasks` tasks used last. Each holds
        a device context; grading attempts grouped by task keeps a slot's own tasks few (`GraderService.keep_tasks`)."""
        self._keeping: dict[str, threading.Lock] = {}  # per kept worker's name: one start of it at a time
        self._kept_lock = threading.Lock()  # `_kept` as one: a start ahead (`start_ahead`) keeps on a thread of its own
        self._ahead: list[threading.Thread] = []
        self.note: Callable[[str, float], None] = lambda purpose, seconds: None
        """Where a worker's start went, by part (`DeviceLock.note`, which the service sets): the acceptance's table."""
        self.live: dict[int, str] = {}
        """pid -> role ("candidate", "expert", "reference", "spare") of every worker of this slot now alive."""
        self.starting: dict[int, str] = {}
        """pid -> role of every worker spawned and not yet through its hello (its CUDA start, seen on the device)."""
        self.ended: collections.OrderedDict[int, str] = collections.OrderedDict()
        """pid -> role of the last `ENDED_NAMED` workers ended (`seen_roles`)."""
        self.config = {
            "device": device, "hide": hide, "reveal": list(reveal), "tmp_mb": tmp_mb, "uid": self.uid, "nproc": 512, "nofile": 1024,
            # RLIMIT_FSIZE also caps the memfds that carry outputs, inputs and float64 answers to the parent;
            # a GPU task's can be gigabytes (H200 run 19: EFBIG on 4 CUDA-L1 outputs). It caps one file, so it
            # never bounded a worker's disk use (its scratch is a tmpfs of tmp_mb; the log cap is checked).
            "fsize_mb": 512 if device == "cpu" else 65536,
            "address_space_mb": address_space_mb if device == "cpu" else None,
            "env": base_env(device), "fallback_scratch": f"/tmp/kerneltraj-slot{index}",
            "cpus": slot_cpus(index, slots) if device != "cpu" else None,
        }
        if not own_root:
            self.config["own_root_off"] = "off: switched off for this service"
        self.launch_gate = launch_gate
        self.reference_arena = reference_arena
        self.output_arena = output_arena
        self._out_arena: wire.Arena | None = None  # the slot's candidates', one after another (`lend_output_arena`)
        self.boot_timeout_s = boot_timeout_s
        self.zygote: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None
        self._triton_seed: dict[str, bytes] = {}  # `seed_triton`'s, for a zygote started again
        self.triton_key_once = triton_key_once
        """The zygote computes Triton's key of itself before it forks any worker (`zygote._triton_key_once`)."""
        self.triton_key_ms: float | None = None
        """What that took, as its zygote last said (None: not asked, or this Triton has no such key)."""
        if mode == "zygote":
            self._launch_zygote()
            if not defer_ready:
                self.await_ready()

    def _start_zygote(self) -> None:
        self._launch_zygote()
        self.await_ready()
        if self._triton_seed:  # a zygote started again is given the seed again
            self._send_triton_seed()

    def seed_triton(self, files: dict[str, bytes]) -> bool:
        """Give this slot's zygote Triton's host module as the service built it (grader.tritonseed): every worker it
        forks from now on plants it in its own Triton cache. False when the zygote refused it (its workers then
        build the module themselves, as without a seed)."""
        if self.mode != "zygote" or not files:
            return False
        with self._ctl_lock:
            self._triton_seed = dict(files)
            return self._send_triton_seed()

    def _send_triton_seed(self) -> bool:
        from grader import tritonseed

        fd = os.memfd_create("kerneltraj-triton-seed", os.MFD_CLOEXEC)
        try:
            blob = memoryview(tritonseed.encode(self._triton_seed))
            while blob:
                blob = blob[os.write(fd, blob):]
            os.lseek(fd, 0, os.SEEK_SET)
            zygote.ctl_send(self.ctl, {"op": "triton_seed"}, [fd])
        finally:
            os.close(fd)
        return bool(zygote.ctl_recv(self.ctl).get("ok"))

    def _launch_zygote(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.zygote = subprocess.Popen([sys.executable, "-m", "grader.zygote", str(theirs.fileno())],
                                       pass_fds=[theirs.fileno()], env=self.config["env"], cwd="/")
        theirs.close()
        self.ctl = ours
        self.ctl.settimeout(self.boot_timeout_s)
        zygote.ctl_send(self.ctl, {"device": self.device, "triton_key_once": self.triton_key_once})

    def await_ready(self) -> None:
        """Wait for the zygote's pre-import (seconds): slots launched together import in parallel."""
        if self.mode != "zygote":
            return
        reply = zygote.ctl_recv(self.ctl)
        if not reply.get("ready"):
            raise RuntimeError(f"zygote {self.index} failed to start: {reply}")
        self.triton_key_ms = reply.get("triton_key_ms")

    def spawn(self, timeout_s: float, memory_limit_mb: int | None = None, *, role: str = "candidate") -> WorkerConn:
        """A fresh worker; `memory_limit_mb` can only tighten the slot's address-space limit (CPU).
        `role`: "expert" or "reference" for a worker kept for a task, under the slot's uid for that role.

        With `spares`, a candidate's worker is the spare started while the slot's last candidate was graded, when
        one started for the same limit (`conn.spare`; its threads move onto the slot's core), else a fresh one;
        either way the next spare starts now, under the other candidate uid, on the cores no slot is given. It
        has run nothing but the worker's own start-up, as a fresh worker has when its hello arrives."""
        if role != "candidate" or not self.spares:
            return self._spawn(timeout_s, memory_limit_mb, role=role, uid=self.uid if role == "candidate" else None)
        conn = self._take_spare(memory_limit_mb) or self._spawn(timeout_s, memory_limit_mb, role=role, uid=self.uid)
        self._start_spare(memory_limit_mb, self.spare_uid if conn.uid == self.uid else self.uid)
        return conn

    def _start_spare(self, memory_limit_mb: int | None, uid: int | None) -> None:
        if self._closing or self._spare is not None:
            return
        box: list = []

        def start() -> None:
            try:
                box.append(self._spawn(self.boot_timeout_s, memory_limit_mb, role="candidate", uid=uid, spare=True))
            except Exception as e:  # noqa: BLE001 - a spare that failed is not used: the next grade spawns its own
                box.append(e)

        thread = threading.Thread(target=start, name=f"slot{self.index}-spare", daemon=True)
        self._spare = (thread, box, memory_limit_mb)
        thread.start()

    def _joined_spare(self) -> tuple[WorkerConn | None, int | None]:
        """The spare once its start-up is done (None if it failed, or there is none) and the limit it started for;
        the slot holds no spare after."""
        if self._spare is None:
            return None, None
        thread, box, limit = self._spare
        thread.join()
        self._spare = None
        return (box[0] if box and isinstance(box[0], WorkerConn) else None), limit

    def _take_spare(self, memory_limit_mb: int | None) -> WorkerConn | None:
        """The spare, when it started for `memory_limit_mb` and is alive; else None (a spare for another limit, or
        dead, is ended)."""
        conn, limit = self._joined_spare()
        if conn is None:
            return None
        if limit != memory_limit_mb or _alive(conn.pid) is not None:
            self._kill(conn, conn.uid)
            return None
        if self.config["cpus"]:
            try:
                pin_threads(conn.pid, self.config["cpus"])
            except OSError:
                self._kill(conn, conn.uid)
                return None
        self.live[conn.pid] = "candidate"
        return conn

    def _spawn(self, timeout_s: float, memory_limit_mb: int | None, *, role: str, uid: int | None,
               spare: bool = False, aside: bool = False) -> WorkerConn:
        config = self.config
        slot_limit = config["address_space_mb"]
        if memory_limit_mb and slot_limit:
            config = dict(config, address_space_mb=min(slot_limit, memory_limit_mb))
        if role != "candidate":
            uid = getattr(self, f"{UID_ROLE.get(role, role)}_uid")
            config = dict(config, uid=uid, fallback_scratch=f"{config['fallback_scratch']}-{role}", role=role)
        else:
            config = dict(config, uid=uid)
        if config["cpus"]:
            config = dict(config, cpus=worker_cpus(self.index, self.slots, role, spare=spare, aside=aside,
                                                   twin_apart=self.twin_apart))
        if spare:
            config = dict(config, fallback_scratch=f"{config['fallback_scratch']}-u{uid}")
        t_start = time.perf_counter()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        a_ours, a_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        popen = None
        if self.mode == "zygote":
            with self._ctl_lock:
                if self.zygote is None or self.zygote.poll() is not None:
                    self._start_zygote()
                zygote.ctl_send(self.ctl, {"op": "spawn", "config": config}, [theirs.fileno(), a_theirs.fileno()])
                pid = int(zygote.ctl_recv(self.ctl)["pid"])
        else:
            env = dict(config["env"], KERNELTRAJ_WORKER_CONFIG=json.dumps(config))
            popen = subprocess.Popen(
                [sys.executable, "-m", "grader.zygote", "--fresh", str(theirs.fileno()), str(a_theirs.fileno())],
                pass_fds=[theirs.fileno(), a_theirs.fileno()], env=env, cwd="/")
            pid = popen.pid
        theirs.close()
        a_theirs.close()
        conn = WorkerConn(sock=ours, audit=a_ours, pid=pid, popen=popen, uid=uid, spare=spare, role=role)
        conn.sock.settimeout(timeout_s)
        # A worker that fails here is ended and reaped, not left behind. It has run no candidate code,
        # so its own process group is all there is: the uid's other processes (kept experts) stay.
        self.starting[pid] = "spare" if spare else role
        try:
            hello, _ = wire.recv(conn.sock, 0)
            if popen is not None and "relay_pid" in hello:  # the exec'd process forked the worker into its namespace
                conn.pid = int(hello["relay_pid"])
                self.starting[conn.pid] = self.starting.pop(pid)
                hello, _ = wire.recv(conn.sock, 0)
        except (OSError, wire.WireError, ValueError, TypeError):
            self._kill(conn, None)
            raise
        if hello.get("ok") is False:  # it failed before its hello and says why (zygote.send_start_failure)
            self._kill(conn, None)
            error = str(hello.get("error") or "").rstrip() or "no traceback sent"
            raise wire.WireError(f"{error_line(error)[:300]}\n{error[-1500:]}")
        conn.hello = hello
        self.live[conn.pid] = self.starting.pop(conn.pid)
        conn.baseline_threads = sandbox.thread_count(conn.pid)
        if isinstance(hello.get("audit_fd"), int):
            conn.audit_target = sandbox.fd_target(conn.pid, hello["audit_fd"])
        if self.device.startswith("cuda"):  # the workers that time, and a reference whose answers may be gated
            try:
                hello["gate"] = (self._lend_gate(conn, timeout_s) if self.launch_gate
                                 else "off: switched off for this service")
            except (OSError, wire.WireError):
                self._kill(conn, None)
                raise
        started = f"worker start, {'spare' if spare else role}"
        parts = hello.get("boot_parts_ms") if isinstance(hello.get("boot_parts_ms"), dict) else {}
        for part, ms in (("sandbox", hello.get("sandbox_ms")), ("boot", hello.get("boot_ms")),
                         *((f"boot's {k}", v) for k, v in sorted(parts.items()))):
            if isinstance(ms, (int, float)):  # the worker's clock: entering its sandbox, its whole boot, its parts
                self.note(f"{started}: {part}", ms / 1e3)
        if isinstance(hello.get("triton_seed_ms"), (int, float)):  # its word, for the table only
            self.note(f"{started}: Triton's module planted (grader.tritonseed)", hello["triton_seed_ms"] / 1e3)
        self.note(f"{started}: to its hello and gate", time.perf_counter() - t_start)  # this side's clock
        return conn

    @staticmethod
    def _lend_gate(conn: WorkerConn, timeout_s: float) -> str:
        """Lend a fresh worker its launch gate's word (before any candidate code runs there); the gate's state
        as the worker's self-test found it ("on", or "off: why"). A gate that is off is not kept."""
        conn.gate = wire.GateWord()
        reply, _, _ = conn.request({"op": "gate"}, timeout_s, fd=conn.gate.fd)
        state = str(reply.get("gate") or f"off: {reply.get('error') or 'no answer'}")[:300]
        if state != "on":
            conn.gate.close()
            conn.gate = None
        return state

    def lend_output_arena(self, conn: WorkerConn, nbytes: int, timeout_s: float) -> str:
        """Lend a fresh candidate worker, before any candidate code runs, the slot's arena for what its fetches
        copy to this side (an output, and the inputs kept with it), grown to `nbytes` (at most wire.ARENA_MAX; a
        bigger fetch takes a memfd). One arena serves the slot's candidates one after another, page-locked once;
        `finish` scrubs it. Returns its state as the worker found it: "pinned", "mapped" or "off: why"."""
        if not self.output_arena:
            return "off: switched off for this service"
        need = min(nbytes, wire.ARENA_MAX)
        if self._out_arena is None or self._out_arena.nbytes < need:
            if self._out_arena is not None:
                self._out_arena.close()
                self._out_arena = None
            try:
                self._out_arena = wire.Arena(need, pin=self.device.startswith("cuda"))
            except OSError as e:  # no memory to lend: the fetches take the memfd path
                return f"off: {type(e).__name__}: {e}"[:300]
        reply, _, _ = conn.request({"op": "arena"}, timeout_s, fd=self._out_arena.fd)
        state = str(reply.get("arena") or f"off: {reply.get('error') or 'no answer'}")[:300]
        if not state.startswith("off"):
            conn.out_arena = self._out_arena
        # Counted again: page-locking is the driver's work on a thread the worker starts and ends (wire._cudart_alone),
        # and whatever the driver keeps of it is no candidate's, which has not run yet.
        conn.baseline_threads = sandbox.thread_count(conn.pid)
        return state

    def expert(self, key: str, source: str, timeout_s: float, aside: bool = False,
               kernels: dict[str, bytes] | None = None) -> WorkerConn:
        """A worker that has loaded the expert `source` (trusted code), kept for later attempts of the
        same task (`key`), so the expert is timed by the same worker code, in the same kind of
        process, as every candidate. `aside`, `kernels`: see `_keep`."""
        return self._keep("expert", key, [{"op": "load", "source": source, "entry_point": "run"}], timeout_s,
                          aside=aside, kernels=kernels)

    def reference(self, key: str, source: str, scale_source: str | None, timeout_s: float,
                  answer_bytes: int = 0, inputs_entry: str | None = None, aside: bool = False) -> WorkerConn:
        """A worker that has loaded the task's reference (and error scale), kept for the task's later
        attempts: corpus code, run only there (`op: reference`), never in this process. `answer_bytes`:
        the largest answer expected; an arena of that size (at most wire.ARENA_MAX) is lent to it.
        `inputs_entry`: the function of the reference's module that makes a task's own inputs (`op: inputs`).
        `aside`: see `_keep`."""
        loads = [{"op": "load", "source": source, "entry_point": "run",
                  **({"inputs_entry": inputs_entry} if inputs_entry else {})}]
        if scale_source:
            loads.append({"op": "load", "source": scale_source, "entry_point": "run", "as": "scale"})
        return self._keep("reference", key, loads, timeout_s,
                          min(answer_bytes, wire.ARENA_MAX) if self.reference_arena else 0, aside=aside)

    def task(self, key: str, expert: str, reference: str, scale_source: str | None, timeout_s: float,
             answer_bytes: int = 0, inputs_entry: str | None = None, aside: bool = False,
             kernels: dict[str, bytes] | None = None) -> WorkerConn:
        """One kept worker that serves a task as its expert twin (`expert`) and as its reference worker (`reference`):
        one device context a task instead of two, one CUDA start instead of two (`task_workers`). Only for a task
        whose expert and reference come from one author (`session.SealedTask.one_author`): the reference then
        reaches nothing in the twin that its author did not write. It runs under the expert's uid (`UID_ROLE`), its
        L2 flush and launch gate are a twin's; the reference is imported as a module of its own (an adapter's
        in-place float64 cast never touches the expert's), with the arena and the task's `get_inputs` as a
        reference worker gets them. `kernels`: see `_keep` (the caller gives them for a built-in card only)."""
        ref = {"op": "load", "source": reference, "entry_point": "run", "as": "reference",
               **({"inputs_entry": inputs_entry} if inputs_entry else {})}
        loads = [{"op": "load", "source": expert, "entry_point": "run"}, ref]
        if scale_source:
            loads.append({"op": "load", "source": scale_source, "entry_point": "run", "as": "scale"})
        return self._keep("task", key, loads, timeout_s,
                          min(answer_bytes, wire.ARENA_MAX) if self.reference_arena else 0, aside=aside,
                          kernels=kernels)

    def start_ahead(self, *starts: Callable[[], object]) -> None:
        """Run each of `starts` (a kept worker's start: `expert` or `reference` with `aside`) on a thread of its own,
        now, so that it boots beside the grade's other work and not after it. A start that fails is dropped: the
        grade's own call starts the worker again and reports why. The grade's own call of a worker being started
        waits for that start (`_keep`), and `close` for every one."""
        self._ahead = [t for t in self._ahead if t.is_alive()]
        for i, start in enumerate(starts):
            if self._closing:
                return

            def run(start=start) -> None:
                with contextlib.suppress(Exception):  # the grade's own call reports it
                    start()

            thread = threading.Thread(target=run, name=f"slot{self.index}-ahead{i}", daemon=True)
            self._ahead.append(thread)
            thread.start()

    def _keep(self, role: str, key: str, loads: list[dict], timeout_s: float, arena_bytes: int = 0,
              aside: bool = False, kernels: dict[str, bytes] | None = None) -> WorkerConn:
        """The kept worker `role:key`, started and loaded if there is none alive. One start of a name at a time: a
        call while a start ahead (`start_ahead`) runs waits for it and takes its worker. `aside`: a worker that must
        start boots (CUDA, the worker's imports, its gate: no task code) on the cores no slot is given, as a spare
        does, and moves onto those its role runs on (`worker_cpus`) before it loads anything. `kernels`: the
        expert's compiled Triton kernels (grader.expertseed), written into a worker that must start before it loads
        anything; one that refuses them, or fails to write them, compiles them itself."""
        name = f"{role}:{key}"
        with self._keeping.setdefault(name, threading.Lock()):
            return self._kept_or_started(name, role, key, loads, timeout_s, arena_bytes, aside, kernels)

    def _kept_or_started(self, name: str, role: str, key: str, loads: list[dict], timeout_s: float,
                         arena_bytes: int, aside: bool, kernels: dict[str, bytes] | None = None) -> WorkerConn:
        if self._closing:
            raise RuntimeError(f"the slot is closing: no {role} of {key} starts")
        with self._kept_lock:
            conn = self._kept.pop(name, None)
            if conn is not None and (conn.popen.poll() if conn.popen else _alive(conn.pid)) is None:
                self._kept[name] = conn  # most recently used last
                return conn
        if conn is not None:
            self._kill(conn, None)
        conn = self._spawn(timeout_s, None, role=role, uid=None, aside=aside)
        if aside and self.config["cpus"]:  # onto the cores its role runs on (apart: where it booted)
            try:
                pin_threads(conn.pid, worker_cpus(self.index, self.slots, role, twin_apart=self.twin_apart))
            except OSError:
                self._kill(conn, None)
                raise
        if kernels:
            self._plant(conn, role, kernels, timeout_s)
        t_loads = time.perf_counter()
        if arena_bytes > 0:
            try:
                conn.arena = wire.Arena(arena_bytes, pin=self.device.startswith("cuda"))
            except OSError:  # no memory to lend: the answers take the memfd path
                conn.arena = None
        for i, msg in enumerate(loads):
            lend = conn.arena.fd if i == 0 and conn.arena is not None else None
            # A reference is corpus code: one that reaches for what the sandbox hides defines no task. In a task's one
            # worker only the reference's loads answer for that: what its expert's load reported is drained and not
            # judged, as an expert worker's is.
            judged = role == "reference" or msg.get("as") in ("reference", "scale")
            seen = conn.answer_audit_mark()
            reply, _, _ = conn.request(msg, timeout_s, fd=lend)
            if not reply.get("ok") or (judged and conn.drain_audit()[seen:]):
                self._kill(conn, None)
                why = reply.get("error", "") or "; ".join(conn.audit_lines[seen:seen + 3]) or \
                    "it reached outside its sandbox"
                named = error_line(why)
                what = "reference" if judged and role == "task" else role  # a task worker's: its reference's load
                raise RuntimeError(f"the {what} of {key} failed to load: {named[:300]}"
                                   + (f" | {why[-400:]}" if why.rstrip() != named else ""))
        self.note(f"worker start, {role}: its arena and the task's code loaded", time.perf_counter() - t_loads)
        with self._kept_lock:
            self._kept[name] = conn
            evicted = []
            while sum(KEPT_WEIGHT.get(n.partition(":")[0], 1) for n in self._kept) > self.max_kept and \
                    len(self._kept) > 1:
                evicted.append(self._kept.pop(next(iter(self._kept))))
        for old in evicted:  # each holds a device context and its flush buffer
            self._kill(old, None)
        return conn

    def _plant(self, conn: WorkerConn, role: str, kernels: dict[str, bytes], timeout_s: float) -> None:
        """`_keep`'s `kernels`, written into the new worker's own Triton cache (`Worker._plant`); noted with the files
        written, or why none were (the worker then compiles them, as without them)."""
        from grader import tritonseed

        t = time.perf_counter()
        try:
            reply, _, _ = conn.request({"op": "plant"}, timeout_s, payload=tritonseed.encode(kernels))
        except (OSError, wire.WireError) as e:
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        took = time.perf_counter() - t
        if reply.get("ok"):
            self.note(f"worker start, {role}: the expert's kernels planted (grader.expertseed)", took)
            conn.planted = int(reply.get("planted") or 0)
        else:
            self.note(f"worker start, {role}: the expert's kernels refused (grader.expertseed)", took)

    def kept_keys(self) -> set[str]:
        """The tasks (`SealedTask.expert_key`) whose expert or reference worker the slot keeps."""
        with self._kept_lock:
            return {_kept_key(name) for name in self._kept}

    def set_aside_all_but(self, key: str, timeout_s: float = 30.0) -> None:
        """The slot grades task `key` next: the kept workers of every other task give their cached device memory back
        (`Worker._trim` at no size), so that a task kept while others are graded holds its workers' device contexts
        only. Those set aside before are asked nothing. One that does not answer is ended: its task's next grade
        starts it again and says what became of it."""
        with self._kept_lock:
            others = [(name, conn) for name, conn in self._kept.items()
                      if _kept_key(name) != key and conn.trimmed is not None]
        for name, conn in others:
            try:
                conn.request({"op": "trim", "key": None}, timeout_s)
                conn.trimmed = conn.answered = None  # no size's memory is ready in it any more
            except (OSError, wire.WireError):
                self._drop(name, conn)

    def drop_expert(self, key: str) -> None:
        """End the kept expert worker of `key` (after it failed or broke its protocol), or the task's one worker."""
        self._drop(f"expert:{key}")
        self._drop(f"task:{key}")

    def drop_reference(self, key: str) -> None:
        self._drop(f"reference:{key}")
        self._drop(f"task:{key}")

    def _drop(self, name: str, conn: WorkerConn | None = None) -> None:
        """End the kept worker `name` (only if it is still `conn`, when named: another may have been started since)."""
        with self._kept_lock:
            if conn is not None and self._kept.get(name) is not conn:
                return
            conn = self._kept.pop(name, None)
        if conn is not None:
            self._kill(conn, None)

    def finish(self, conn: WorkerConn | None) -> str:
        """Kill the worker and everything it left behind, then scrub its output arena; describe how it had ended."""
        if conn is None:
            return "no worker"
        how = self._kill(conn, conn.uid)
        if conn.out_arena is not None:  # the worker is gone: nothing writes it any more
            conn.out_arena.scrub()
            conn.out_arena = None
        return how

    def _kill(self, conn: WorkerConn, uid: int | None) -> str:
        t, role = time.perf_counter(), self._gone(conn.pid) or "failed to start"  # never said hello
        _signal_all(conn, uid)
        how = self._reaped(conn)
        self.note(f"worker end, {role}: killed and reaped", time.perf_counter() - t)
        return how

    ENDED_NAMED = 256
    """How many ended workers `ended` names: a timing loop's device watch reads the roles at the loop's end, after
    workers it saw may have ended."""

    def _gone(self, pid: int) -> str | None:
        """The worker `pid` ends, alive or still starting; now named in `ended`. Its role if it was alive (None: it
        never said hello)."""
        role = self.live.pop(pid, None)
        named = role or self.starting.pop(pid, None)
        if named is not None:
            self.ended[pid] = named
            self.ended.move_to_end(pid)
            while len(self.ended) > self.ENDED_NAMED:
                self.ended.popitem(last=False)
        return role

    def seen_roles(self) -> dict[int, str]:
        """pid -> role of each worker the device may show for this slot: alive ("expert"), ending or lately ended
        ("expert, ended"), or spawned and not yet through its hello ("spare, starting"). Before H100 run 97 the
        ended and starting ones were "not ours" to the device watch: 55 of its 78 such pids were this service's
        workers, seen under their roles in other loops, and 7.1 GiB of the device's memory "not ours" was theirs."""
        out = {pid: f"{role}, ended" for pid, role in list(self.ended.items())}
        out.update({pid: f"{role}, starting" for pid, role in list(self.starting.items())})
        out.update(list(self.live.items()))
        return out

    def _reaped(self, conn: WorkerConn) -> str:
        """Reap a signalled worker and close what it was lent; how it ended."""
        how = "exit status unknown"
        try:
            if conn.popen is not None:
                conn.popen.wait(timeout=30)
                rc = conn.popen.returncode
                how = f"killed by signal {-rc}" if rc < 0 else f"exited with code {rc}"
            else:
                with self._ctl_lock:
                    zygote.ctl_send(self.ctl, {"op": "reap", "pid": conn.pid})
                    st = int(zygote.ctl_recv(self.ctl).get("status"))
                how = (f"killed by signal {os.WTERMSIG(st)}" if os.WIFSIGNALED(st)
                       else f"exited with code {os.WEXITSTATUS(st)}")
        except (OSError, subprocess.TimeoutExpired, wire.WireError, TypeError, ValueError):
            pass
        for s in (conn.sock, conn.audit):
            s.close()
        for lent in ("arena", "gate"):
            if getattr(conn, lent) is not None:
                getattr(conn, lent).close()
                setattr(conn, lent, None)
        return how

    def close(self) -> None:
        self._closing = True
        for thread in self._ahead:  # a start ahead ends in its worker kept, or in nothing
            thread.join(self.boot_timeout_s)
        spare, _ = self._joined_spare()
        if spare is not None:
            self._kill(spare, spare.uid)
        for name in list(self._kept):
            self._drop(name)
        if self._out_arena is not None:
            self._out_arena.close()
            self._out_arena = None
        if self.ctl is not None:
            try:
                zygote.ctl_send(self.ctl, {"op": "bye"})
            except OSError:
                pass
            self.ctl.close()
        if self.zygote is not None:
            try:
                self.zygote.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.zygote.kill()
        if self.uid is not None:
            sandbox.kill_uid(self.uid)
        for uid in (self.expert_uid, self.reference_uid, self.spare_uid):
            if uid is not None:
                sandbox.kill_uid(uid)
        for attr in ("_uid_lock", "_expert_uid_lock", "_reference_uid_lock", "_spare_uid_lock"):
            if getattr(self, attr) is not None:
                os.close(getattr(self, attr))  # releases the uid for another slot
                setattr(self, attr, None)


def _signal_all(conn: WorkerConn, uid: int | None) -> None:
    """SIGKILL a worker, its process group, and (given its uid) every process of that uid."""
    for fn in (lambda: os.killpg(conn.pid, 9), lambda: os.kill(conn.pid, 9)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            fn()
    if uid is not None:
        sandbox.kill_uid(uid)


def _alive(pid: int) -> None | int:
    """None while `pid` runs (the shape of Popen.poll), else 0; a zombie the zygote has not yet
    reaped counts as ended."""
    try:
        return 0 if sandbox.stat_fields(f"/proc/{pid}/stat")[0] in ("Z", "X") else None
    except (OSError, IndexError):
        return 0
