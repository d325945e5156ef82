"""Every call observed: what the candidate's thread asked the library for, and what the device ran.

A worker records the ops of all its threads in a profiler session from before the first call of a size to
after the last, the same way in the candidate's worker and in its twin's. So every call, checked, warm-up
or timed, runs watched, and whatever a candidate asks torch about the profiler has one answer on every
call: a candidate that calls the library only when unobserved has no unobserved call to do it in
(GRADER.md, the call boundary; issue: close the escapes). The one call of a size the parent marks `trace`
runs in a session of its own that also records the device's kernels (CUPTI); its pair is not timed, since
the trace costs the timing (H200 run 26).

Inside a session each call is a window, a range the worker's main thread records around the call
(`CALL_MARK`). Closing it attributes to each window the ops recorded on any other thread (the
candidate's) and the kernels the device ran inside it. Each session opens with `WORKER_MARK` on the main
thread, before any candidate code runs in it, which tells the main thread apart from a candidate's that
records marks of the same names. The candidate's thread records `RETURN_MARK` once its function has
returned (grader/boundary.py): a window without it, or a session with fewer windows than calls, means
the recording was switched off, on that thread or for everyone.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from grader.boundary import RETURN_MARK  # recorded on the candidate's thread once its function returned
from grader.timing import off_stream_kernels  # threat 7's rule: the caller's stream is the first kernel's

CALL_MARK = "kerneltraj-call"
"""The range the worker's main thread records around each observed call."""
WORKER_MARK = "kerneltraj-worker"
"""The range around the marker kernel that names the caller's stream (the session's first kernel)."""
MARKS = frozenset({CALL_MARK, WORKER_MARK, RETURN_MARK})
MAX_NAMES = 400
"""Names kept per call and list: a call that runs more distinct ops than this is judged on these."""


@dataclass(frozen=True)
class Event:
    """One record of the session, reduced to what the attribution needs."""

    name: str
    thread: int
    start: float
    end: float
    device: bool = False
    stream: object = None


def attribute(events: list[Event], tags: list[str], _call=CALL_MARK, _worker=WORKER_MARK, _ret=RETURN_MARK,
              _marks=MARKS, _most=MAX_NAMES, _off_stream=off_stream_kernels) -> list[dict]:
    """Per call (in order): its tag, the ops its candidate thread ran, the kernels inside its window, those
    on another stream than the caller's, and whether its marks are in the record.

    The caller's stream is the earliest kernel's (the marker the worker launched when the session
    opened), judged by `timing.off_stream_kernels`."""
    host = sorted((e for e in events if not e.device), key=lambda e: e.start)
    opened = next((e for e in host if e.name == _worker), None)
    main = opened.thread if opened is not None else None  # marked before any candidate code ran in the session
    windows = [e for e in host if e.name == _call and e.thread == main]
    # the device's own records of the marks (a GPU user annotation per range) are not kernels
    kernels = sorted((e for e in events if e.device and e.name not in _marks), key=lambda e: e.start)
    marker = [(kernels[0].start, kernels[0].name, kernels[0].stream)] if kernels else []
    host = [e for e in host if e.thread != main]
    calls = []
    for i, tag in enumerate(tags):
        if i >= len(windows):
            calls.append({"tag": tag, "seen": False, "returned": False, "ops": [], "kernels": [], "foreign": []})
            continue
        w = windows[i]
        inside = [e for e in host if w.start <= e.start <= w.end]
        ran = [e for e in kernels if w.start <= e.start <= w.end]
        calls.append({
            "tag": tag, "seen": True,
            "returned": any(e.name == _ret for e in inside),
            "ops": sorted({e.name for e in inside if e.name not in _marks})[:_most],
            "kernels": sorted({e.name for e in ran})[:_most],
            "foreign": _off_stream(marker + [(e.start, e.name, e.stream) for e in ran if e is not kernels[0]])[:50],
        })
    return calls


class Recorder:
    """Starts and stops torch's profiler through its C entry points, bound when the worker starts, before any
    candidate code exists. The names the rest of the process sees are refusals off the worker's main thread
    (`grader.guard.seal_observation`), so a candidate can neither stop a session nor start its own.

    Two kinds of session: the ops of every thread (`device=False`), and the same plus the device's kernels
    (`device=True`, CUPTI). Both look alike to Python; the device's costs the timing (H200 run 26: with it
    on for every call, kernels of 40 us timed at 0.1-0.4 ms), so it is kept for the one call of a size whose
    pair is not timed."""

    def __init__(self, torch, cuda: bool, extra: dict):
        from torch.autograd import profiler as autograd_profiler

        c = torch._C._autograd
        self._configs = {}
        for device in ((False, True) if cuda else (False,)):
            proto = autograd_profiler.profile(use_cpu=True, use_device="cuda" if device else None, use_kineto=True,
                                              **extra)
            self._configs[device] = (proto.config(), proto.kineto_activities)  # this torch's own layout
        self._prepare, self._enable, self._disable = c._prepare_profiler, c._enable_profiler, c._disable_profiler
        self._cuda = c.DeviceType.CUDA

    def start(self, device: bool = False) -> None:
        config, activities = self._configs[device if device in self._configs else False]
        self._prepare(config, activities)
        self._enable(config, activities)

    def stop(self, _event=Event) -> list[Event]:
        cuda, out = self._cuda, []
        for e in self._disable().events():
            device = e.device_type() == cuda
            start = e.start_ns()
            out.append(_event(e.name(), e.start_thread_id(), start, start + e.duration_ns(), device,
                              e.device_resource_id() if device else None))
        return out


class Observation:
    """The sessions over a size's calls: the ops of every call, the device's kernels for the calls the parent
    asks a trace of. `begin(device)` marks a session's start on the main thread (and names the caller's stream
    with a marker kernel in a device session)."""

    def __init__(self, recorder: Recorder, begin):
        self._recorder, self._begin = recorder, begin
        self._batches: list[tuple[list[Event], list[str]]] = []
        self._tags: list[str] = []
        self.trace_ms: list[float] | None = None  # the last traced call's sessions: `call`
        self._open(False)

    def _open(self, device: bool) -> None:
        self._recorder.start(device)
        self._begin(device)

    def _close(self) -> None:
        self._batches.append((self._recorder.stop(), self._tags))
        self._tags = []

    def call(self, tag: str, traced: bool, work, _now=time.perf_counter_ns):
        """`work()` as one observed call (a window), in a session of its own with the device's kernels when
        `traced`; its result. A traced call's `trace_ms`: the ops' session closed, the device's opened, the device's
        closed (its events read), the ops' opened again (ms, the worker's clock; for the acceptance's breakdown)."""
        if traced:
            t0 = _now()
            self._close()
            t1 = _now()
            self._open(True)
            t2 = _now()
        self._tags.append(tag)
        try:
            return work()
        finally:
            if traced:
                t3 = _now()
                self._close()
                t4 = _now()
                self._open(False)
                self.trace_ms = [(t1 - t0) / 1e6, (t2 - t1) / 1e6, (t4 - t3) / 1e6, (_now() - t4) / 1e6]

    def report(self, _attribute=attribute) -> list[dict]:
        self._close()
        return [call for events, tags in self._batches for call in _attribute(events, tags)]

    def stop(self) -> None:
        """Close without attributing (the twin's record is not judged)."""
        self._close()
