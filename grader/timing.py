"""Device-wide timing of one call, and the statistics that decide how many calls are enough.

`DeviceClock` captures every timer it uses when it is built, so code loaded later cannot swap
them. One timed call on CUDA:

    gate closed (queued) | the inputs' draw | flush L2 | start event | the call | end event | output copy
    | "queued" told to the parent | the parent opens the gate | host: spin on end, device-wide sync
    | done event | "done" told to the parent

The gate (`StreamGate`) holds the caller's stream until the host has queued the whole call, so
the device runs the draw, flush, call and copy back to back: start..end is the kernels' own time,
whatever the host's launches cost. Without it the interval held every launch gap the host left: a
flush that ended before the launch did, or a multi-kernel call launched from a busy CPU (on an H200
with six grading workers timings of 30 us kernels read 90-130 us; in run 34 a third of the expert
twin's timings under load were over 1.5x its fastest). Only timed calls are gated: a size's first
calls load kernels, and a load may wait for the device.

The gate is a word in a page the parent lends the worker (`wire.GateWord`), registered with the
driver; the stream waits for it to read 1. The parent writes it once the worker has said the call is
queued. It sends a gated call only when the device is free for that call alone (grader.devicelock,
`window`), and takes the window back when the worker says "done". So the calls of several slots'
timing loops interleave, one slot's host work (the interpreter check, the parent's checks) beside
another's window, and no two workers ever have their gates closed at once.
A call that waits for the device itself (a synchronise or a copy to the host inside the candidate's
code) would wait for the gate forever, perhaps holding the worker's GIL: the parent opens the gate
when no "queued" has come within `GATE_PATIENCE_S`. That call is then timed as without a gate, with
its launch gaps, and its reply says so (`stalled`). The gate never hides host work that reads the
inputs: reading them waits for the device, which the gate holds until the parent opens it.

Work hidden on a side stream or deferred past the end event still lands before `done`, which is
recorded only after a device-wide synchronise. The host spins on the end event before that
synchronise: a blocking wait sleeps deeper the longer the kernel runs, and on an H200 a 1 ms
candidate's gap came out 10-30 us above its 50 us twin's. end..done is returned as the call's gap;
the session compares the candidate's gaps with its expert twin's at the same size
(grader/session.py), instead of with a constant calibrated once: the wake-up after a synchronise
moves with the host's load.
"""
from __future__ import annotations

import fcntl
import math
import mmap
import os
import time

from grader import wire

FLUSH_BYTES = 256 << 20
"""L2 flush per timed call: five times the H200's 50 MB L2, as Triton's benchmark helper writes. It runs behind
the gate, before the start event, inside the call's device window, which it was most of: grader 0.10.0's 1 GiB
took about 0.3 ms of the device per call (from 0.11.0 the windows of several slots follow one another)."""

GATE_LOOK_S = 0.002
"""A worker asleep on its gate's word (`StreamGate.wait_open`) looks at it at least this often: the parent's wake
(`wire.GateWord.open`) is what ends the sleep; this bounds one that went missing."""

GATE_PATIENCE_S = 0.02
"""How long the parent lets a gated call run before it opens the gate itself (a call that synchronises pays it
once per call). Long enough for the launches of a model of a few hundred ops: a call let through before it
has launched everything is timed with its remaining launch gaps, and a size whose calls went both ways would
time two ways."""


class DeviceClock:
    def __init__(self, device: str, flush: bool = True, gate: bool | None = None):
        """`flush`: allocate the L2 flush buffer (a worker that never times, a reference's, needs none); a
        clock that flushes has a launch gate too, armed when the parent lends it its word (`StreamGate.arm`), and so
        has one made with `gate` (a reference's: its answers may be queued behind it, `Effort.gated_reference`)."""
        import torch

        self.cuda = device.startswith("cuda")
        self._perf_ns = time.perf_counter_ns
        # The last told call's marks (`time_call`), written in place: the worker's state check holds the clock's
        # every attribute to the object it was (`make_integrity_check`'s strict owners), so a new tuple per call
        # would read as tampering (H200 run 60 flagged every GPU grade so). [told, gate seen open, end, synced].
        self._marks = [False, 0, 0, 0]
        # Bound now, at the C level or to functions that look nothing up: a candidate that later replaces
        # torch.cuda.synchronize, Tensor.zero_ or Event.record reaches none of them (GRADER.md, the call
        # boundary). The events are made once; a call re-records them.
        self._sync = getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize) if self.cuda else (lambda: None)
        if self.cuda:
            event = torch.cuda.Event
            self._record, self._elapsed, self._query = event.record, event.elapsed_time, event.query
            self._stream = torch.cuda.current_stream()
            self._events = tuple(event(enable_timing=True) for _ in range(3))
            self._flush_buf = torch.empty(FLUSH_BYTES if flush else 1, dtype=torch.int8, device=device)
            self._zero = torch._C.TensorBase.zero_
        self._l2 = PersistingL2() if self.cuda else None
        self.gate = StreamGate(self._stream.cuda_stream) if self.cuda and (flush if gate is None else gate) else None

    def now_ns(self) -> int:
        return self._perf_ns()

    def sync(self) -> None:
        self._sync()

    def take_persisting_l2(self, stream: int | None = None) -> int:
        """Bytes of persisting L2 reserved beyond the baseline, or of access-policy window on `stream`,
        since the last look (0 = none); undone."""
        return self._l2.take(stream) if self._l2 is not None else 0

    def _note_marks(self, told: bool, seen: int, end: int, synced: int) -> None:
        m = self._marks
        m[0], m[1], m[2], m[3] = told, seen, end, synced

    def marks_ns(self) -> tuple[int, int, int] | None:
        """The last call's (gate seen open, end seen, synced), or None when it was not a told, gated call."""
        m = self._marks
        return (m[1], m[2], m[3]) if m[0] else None

    def time_call(self, fn, args, flush: bool = True, snapshot=None, settle=None, gated: bool = False,
                  announce=None, prelude=None) -> tuple[object, object, float, float, float]:
        """Run fn(*args) once after an L2 flush; returns (its result, snapshot(result), device ms start..end,
        host ms, gap ms end..done across a device-wide synchronise).

        `gated`: queue the call behind the gate, if it is armed (or still closed since the caller closed it to
        queue the inputs' draw behind it too). With `announce`, the worker's word to its parent, the parent
        opens it: `announce("drawn")` once the gate is closed (everything before it, the inputs' draw included,
        is the call's untimed device work: the parent's draw window ends there), `announce("queued")` once the
        whole call is queued, `announce("done")` once the device is done with it. Without, the clock opens the
        gate itself once the call is queued, and `self.gate.stalled` tells whether someone had opened it first.

        `prelude()`: untimed device work to queue behind the closed gate once "drawn" is said, before the flush (a
        call's inputs drawn behind its gate, `Effort.fill_behind`). Queued after "drawn", a launch of it that waits
        for the device (a kernel's first load waits for the gate) is let through by the parent's patience as a
        stalled call; queued before, it would wait for a "drawn" never said while the parent waited for it.

        `snapshot` is queued right after the end event, before the wait for it: its copy of the output
        is ordered behind every kernel of the call on the caller's stream, and work launched to fill the
        output later lands in the gap (charged) or after the copy (never read). `settle(result)` waits
        for whatever ran fn to finish (the candidate's thread): on CUDA after the done event (its teardown is
        host work; any device work it queued comes after the copy); on CPU before the copy, which the
        host takes."""
        if not self.cuda:
            if prelude is not None:
                prelude()
            t0 = self._perf_ns()
            out = fn(*args)
            if settle is not None:
                settle(out)
            host = (self._perf_ns() - t0) / 1e6
            return out, snapshot(out) if snapshot else None, host, host, 0.0
        if flush and self._l2 is not None:
            self._l2.restore()  # no persisting carve-out survives into the next call (threat 14)
        start, end, done = self._events
        record, stream = self._record, self._stream
        gate = self.gate if self.gate is not None and self.gate.ok else None
        told = gated and announce is not None and gate is not None  # the parent's side has this gate's word
        if gate is not None:
            gate.stalled = False
            if not (gated and (gate.closed or gate.close())):
                gate = None
        if told and gate is not None:  # a gate that would not close says nothing here: the parent then keeps the
            announce("drawn")           # call inside its draw window, beside no device interval
        t0 = self._perf_ns()
        try:
            if prelude is not None:
                prelude()
            if flush:
                self._zero(self._flush_buf)
            record(start, stream)
            out = fn(*args)
            record(end, stream)
            snap = snapshot(out) if snapshot else None
        finally:
            if told:  # the parent opens the gate once the device is this call's alone
                announce("queued")
            elif gate is not None:
                gate.stalled = not gate.open()
        if told and gate is not None:
            gate.wait_open()  # other slots' windows first: asleep on the word meanwhile
        t_seen = self._perf_ns()
        while not self._query(end):  # spin: a blocking wait sleeps longer the longer the kernel runs
            pass
        t_end = self._perf_ns()
        self._sync()  # every stream of the device
        record(done, stream)
        self._sync()
        t_synced = self._perf_ns()
        # where the parent's device window went, on the clock every process shares (CLOCK_MONOTONIC): the gate
        # seen open, the end event seen, the device synchronised; for the acceptance's breakdown, never a verdict
        self._note_marks(told and gate is not None, t_seen, t_end, t_synced)
        host = (t_synced - t0) / 1e6
        if gate is not None:
            gate.closed = False  # the device has passed the wait, whoever opened it
        if told:
            announce("done")
        if settle is not None:  # after done: the thread's teardown is not the device's time
            settle(out)
        return out, snap, self._elapsed(start, end), host, self._elapsed(end, done)


class StreamGate:
    """Holds a stream at a point until the host opens it: the stream waits for a 32-bit word in page-locked
    host memory to read 1 (`cuStreamWaitValue32`); a plain store of 1, by the worker or by its parent,
    opens it, with no driver call and no lock. The page is the parent's (`wire.GateWord`), lent once
    before any candidate code exists (`arm`); driver entry points are bound at construction. Until armed,
    or when the self-test fails (`state` says why), calls are timed without a gate."""

    GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ
    DEVICEMAP = 0x02  # CU_MEMHOSTREGISTER_DEVICEMAP

    def __init__(self, stream: int):
        import ctypes

        self._ct = ctypes
        self.ok, self.state, self.closed, self.stalled = False, "off: no word lent", False, False
        self._stream = ctypes.c_void_p(stream)
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            self._wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
            self._write = getattr(lib, "cuStreamWriteValue32_v2", None) or lib.cuStreamWriteValue32
            for f in (self._wait, self._write):
                f.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
                f.restype = ctypes.c_int
            self._register = getattr(lib, "cuMemHostRegister_v2", None) or lib.cuMemHostRegister
            self._device_ptr = getattr(lib, "cuMemHostGetDevicePointer_v2", None) or lib.cuMemHostGetDevicePointer
            self._stream_create, self._stream_sync = lib.cuStreamCreate, lib.cuStreamSynchronize
        except (OSError, AttributeError) as e:
            self._wait = None
            self.state = f"off: {type(e).__name__}: {e}"[:300]

    def arm(self, fd: int) -> str:
        """Map the parent's page (sealed against resizing), register it with the driver and prove the gate
        holds and opens; closes fd. Returns the state ("on", or "off: why")."""
        import torch

        ct = self._ct
        try:
            if self._wait is None:
                return self.state
            if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & wire.RESIZE_SEALS != wire.RESIZE_SEALS:
                raise OSError("the gate's page is not sealed against resizing")
            self._mm = mmap.mmap(fd, mmap.PAGESIZE)
            self._cell = ct.c_uint32.from_buffer(self._mm)
            host = self._host = ct.addressof(self._cell)
            self._futex = wire.Futex()
            if self._register(ct.c_void_p(host), ct.c_size_t(mmap.PAGESIZE), self.DEVICEMAP) != 0:
                raise OSError("cuMemHostRegister refused the gate's page")
            dptr = ct.c_uint64(0)
            if self._device_ptr(ct.byref(dptr), ct.c_void_p(host), 0) != 0:
                raise OSError("cuMemHostGetDevicePointer failed")
            self._addr = dptr
            opener = ct.c_void_p(0)
            if self._stream_create(ct.byref(opener), 0x1) != 0:  # CU_STREAM_NON_BLOCKING: a last resort opener
                raise OSError("cuStreamCreate failed")
            self._opener = opener
            self.state = self._self_test(torch)
        except (OSError, ValueError, AttributeError, RuntimeError) as e:
            self.state = f"off: {type(e).__name__}: {e}"[:300]
        finally:
            os.close(fd)
        self.ok = self.state == "on"
        return self.state

    def _self_test(self, torch) -> str:
        """Close the gate, queue an event behind it, see the event wait; open it with a store, see it done. A
        store the device does not see is answered by a write from the device's side, so the stream is
        never left held."""
        after = torch.cuda.Event()
        torch.cuda.synchronize()
        if not self.close():
            return "off: cuStreamWaitValue32 refused"
        after.record()
        time.sleep(0.002)
        held = not after.query()
        self.open()
        if not _until(after.query, 0.5):
            self._write(self._opener, self._addr, 1, 0)
            self._stream_sync(self._opener)
            if not _until(after.query, 0.5):
                return "off: the stream stayed held at the gate"
            return "off: the device did not see the host's store"
        if not held:
            return "off: the stream did not wait at the gate"
        return "on"

    def close(self) -> bool:
        """Queue, on the stream, a wait for the word to read 1; False when the driver refused it."""
        self._cell.value = 0
        self.closed = self._wait(self._stream, self._addr, 1, self.GEQ) == 0
        return self.closed

    def wait_open(self) -> None:
        """Until the word reads 1 (the parent has opened the gate), asleep on it between looks (`wire.Futex`: the
        parent wakes it as it opens; a look every `GATE_LOOK_S` whatever happens)."""
        cell, wait, addr = self._cell, self._futex.wait, self._host
        while not cell.value:
            wait(addr, 0, GATE_LOOK_S)

    def open(self) -> bool:
        """Let the stream run on; True when the gate was still closed (nobody else had opened it)."""
        if not self.closed:
            return False
        self.closed = False
        was = self._cell.value
        self._cell.value = 1
        return was == 0


def _until(ready, seconds: float) -> bool:
    """Poll `ready()` until it is true or `seconds` have passed."""
    end = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > end:
            return False
        time.sleep(0.0002)
    return True


class PersistingL2:
    """The device's persisting-L2 set-aside, read and reset through the CUDA driver (threat 14).

    A kernel that reserves persisting L2 and pins its inputs there keeps them cached through an
    ordinary flush. The grader never reserves any: a limit above the one found at start-up is the
    candidate's, is reported, and is put back together with the persisting lines themselves.
    Driver entry points are bound at construction, before candidate code exists."""

    LIMIT = 0x06  # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    WINDOW = 1  # CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW

    def __init__(self):
        import ctypes

        self._ct = ctypes
        self._sget = self._sset = None
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            self._get, self._set = lib.cuCtxGetLimit, lib.cuCtxSetLimit
            self._reset = lib.cuCtxResetPersistingL2Cache
            self._set.argtypes = [ctypes.c_int, ctypes.c_size_t]
        except (OSError, AttributeError):
            self._get = None
        try:
            self._sget, self._sset = lib.cuStreamGetAttribute, lib.cuStreamSetAttribute
        except (NameError, AttributeError):
            pass
        self.baseline = self._read() or 0

    def _read(self) -> int | None:
        if self._get is None:
            return None
        value = self._ct.c_size_t(0)
        return int(value.value) if self._get(self._ct.byref(value), self.LIMIT) == 0 else None

    def restore(self) -> None:
        """Put back a limit raised since start-up and demote its lines; one driver read otherwise."""
        if self._get is not None and (self._read() or 0) > self.baseline:
            self._set(self.LIMIT, self.baseline)
            self._reset()

    def take(self, stream: int | None = None) -> int:
        """Bytes of carve-out (limit above the baseline) or of access-policy window on `stream` (a raw
        CUstream) set since the last look; both are undone. 0 = neither."""
        window = self._take_window(stream) if stream is not None else 0
        now = self._read()
        if now is None or now <= self.baseline:
            return window
        self.restore()
        return max(now - self.baseline, window)

    def _take_window(self, stream: int) -> int:
        """An access-policy window on the caller's stream asks for persisting lines even where the
        limit cannot be raised; the grader never sets one, so any is the candidate's."""
        if self._sget is None:
            return 0
        buf = (self._ct.c_char * 64)()  # CUstreamAttrValue; the window's num_bytes follows its base pointer
        if self._sget(self._ct.c_void_p(stream), self.WINDOW, buf) != 0:
            return 0
        num_bytes = self._ct.c_size_t.from_buffer(buf, self._ct.sizeof(self._ct.c_void_p)).value
        if num_bytes:
            self._sset(self._ct.c_void_p(stream), self.WINDOW, (self._ct.c_char * 64)())
            self._reset()
        return int(num_bytes)


def off_stream_kernels(device_events: list[tuple[float, str, object]]) -> list[str]:
    """Kernels of a profiled call that ran on another stream than the caller's (threat 7).

    `device_events` are (start, name, stream id) of the trace's device activities; the earliest is
    the marker the worker launched on the caller's stream just before the call. Streams the trace
    does not name (None) prove nothing and are never flagged."""
    if not device_events:
        return []
    ordered = sorted(device_events, key=lambda e: e[0])
    caller = ordered[0][2]
    if caller is None:
        return []
    return sorted({name for _, name, stream in ordered[1:] if stream is not None and stream != caller})


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def median_ci(xs: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median from order statistics."""
    s = sorted(xs)
    n = len(s)
    if n < 3:
        return (s[0], s[-1])
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return (s[lo], s[max(hi, lo)])
