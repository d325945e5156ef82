"""Where the grading service's slot threads are, sampled (`bench/gpu_acceptance.py --sample-stacks MS`).

A slot's time by part of the grade (the acceptance's `part_lines`) says what a grade was doing, not what held its thread
meanwhile: a reply from a worker, the device lock, or the parent's own Python, which every slot thread runs under one
interpreter lock. On the hosts of H100 runs 143-146 and H200 run 147 a fixed Python loop took 76-154 ms (49 on the CPU
machine the tests run on), read beside the service's start (`gpu_acceptance.environment`: no reading of the host alone).
This sampler reads every slot thread's stack every few milliseconds (`sys._current_frames`, from a daemon thread of the
grading process) and counts where each was: by what it waited for (`WAITS`: a worker's reply, the device lock, another
thread, or nothing, the parent's own Python), by the innermost frame of the grader's own code (`grader/...`, the
function and line), and by the innermost frames whatever their module. A thread blocked in C (a socket's read, a lock's
wait) shows the Python line that called it; one that runs Python, or waits for the interpreter lock to run it, shows the
line it runs.

A slot thread is one whose stack holds `GraderService._run_slot` (`grader/service.py`): nothing in the grader names
its threads, and the sampler changes nothing there.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time

from bench.hostwatch import Sampler

SLOT_FUNCTION = ("service.py", "_run_slot")
"""The outermost grader frame of a slot thread: its file's name and its function."""

GRADER_DIR = os.sep + "grader" + os.sep
"""What a frame's file holds when it is the grader's own code."""

TOP = 12
"""The most rows a table of `lines` gives; the rest are one row."""

WAITS = (("a worker's reply", ("wire.py:_recv_exact", "wire.py:recv_fd", "hangwatch.py:wait", "zygote.py:ctl_recv")),
         ("the device lock", ("devicelock.py:",)),
         ("another slot's start of a shared worker, or a thread", ("launcher.py:_keep", "threading.py:")),
         ("a host copy out of an arena (its page-locked allocation, its copy)", ("wire.py:_read",)))
"""What a sample waited for, by the first of these that its innermost grader frame (`file:function`), or else its
innermost frame, begins with; a sample that matches none ran the parent's own Python, or waited for the
interpreter lock to run it. A worker's reply is also what the device's work comes back in. A host copy is torch's
work in C, apart from the Python: H100 run 148 counted it with the Python, 11.2% of round 1's samples of 21.4%."""
OWN = "the parent's own Python (or its interpreter lock)"


def what_waited(grader: str, inner: str) -> str:
    """The `WAITS` name of a sample (its innermost grader frame and its innermost frames), else `OWN`."""
    innermost = inner.split(" < ", 1)[0]
    for name, starts in WAITS:
        if grader.startswith(starts) or innermost.startswith(starts):
            return name
    return OWN


def _where(frame) -> str:
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}"


def is_slot(frame) -> bool:
    """Whether a thread whose innermost frame is `frame` runs a slot (`SLOT_FUNCTION` in the grader's code)."""
    f = frame
    while f is not None:
        code = f.f_code
        if code.co_name == SLOT_FUNCTION[1] and os.path.basename(code.co_filename) == SLOT_FUNCTION[0] \
                and GRADER_DIR in code.co_filename:
            return True
        f = f.f_back
    return False


def where(frame, depth: int = 3) -> tuple[str, str]:
    """(the innermost grader frame, the innermost `depth` frames joined) of a thread whose innermost frame is
    `frame`: a walk that stops once it has both."""
    inner, grader = [], ""
    f = frame
    while f is not None and not (grader and len(inner) >= depth):
        if len(inner) < depth:
            inner.append(_where(f))
        if not grader and GRADER_DIR in f.f_code.co_filename:
            grader = _where(f)
        f = f.f_back
    return grader or "(no grader frame)", " < ".join(inner)


class StackSampler(Sampler):
    """Samples the slot threads' stacks every `interval_s` on a daemon thread until `stop()`."""

    def __init__(self, interval_s: float = 0.01, depth: int = 3):
        self.interval_s = interval_s
        self.depth = depth
        self.samples: list[tuple[float, str, str]] = []  # (time, innermost grader frame, innermost frames)
        self.ticks: list[float] = []
        super().__init__("stacksample")

    def _run(self) -> None:
        me = threading.get_ident()
        known: dict[int, tuple[threading.Thread | None, bool]] = {}  # ident -> (its thread, whether a slot's)
        while not self._stop.wait(self.interval_s):
            now = time.perf_counter()
            self.ticks.append(now)
            threads = {t.ident: t for t in threading.enumerate()}
            frames = sys._current_frames()
            for ident, frame in frames.items():
                thread = threads.get(ident)
                seen = known.get(ident)
                if seen is None or seen[0] is not thread:  # a whole walk once a thread (an ident is reused)
                    seen = known[ident] = (thread, ident != me and is_slot(frame))
                if seen[1]:
                    self.samples.append((now, *where(frame, self.depth)))
            if len(known) > 2 * len(frames):  # the threads that ended (a spare's starter each grade) forgotten
                known = {i: v for i, v in known.items() if i in frames}
            del frames, frame  # frames kept alive here would keep their locals alive

    def lines(self, t_from: float, t_to: float, label: str) -> list[str]:
        """The samples between two `time.perf_counter()` readings: the share of slot-thread samples by what they waited
        for, then at each innermost grader frame, then at each stack of innermost frames, the largest first."""
        rows = [s for s in self.samples if t_from <= s[0] <= t_to]
        ticks = [t for t in self.ticks if t_from <= t <= t_to]
        if not rows:
            return [f"  {label}\tno slot thread sampled"]
        spacing = (ticks[-1] - ticks[0]) / (len(ticks) - 1) * 1e3 if len(ticks) > 1 else float("nan")
        out = [f"  {label}\t{len(rows)} slot-thread samples in {len(ticks)} ticks (every {spacing:.1f} ms, asked "
               f"{self.interval_s * 1e3:g}), {len(rows) / max(len(ticks), 1):.1f} slot threads a tick"]
        for title, key in (("what it waited for", lambda s: what_waited(s[1], s[2])),
                           ("innermost grader frame", lambda s: s[1]),
                           (f"innermost {self.depth} frames", lambda s: s[2])):
            counts = collections.Counter(key(s) for s in rows)
            out.append(f"  {label}\tby {title}\tshare\tsamples")
            for place, n in counts.most_common(TOP):
                out.append(f"  {label}\t  {place}\t{100 * n / len(rows):.1f}%\t{n}")
            rest = len(rows) - sum(n for _, n in counts.most_common(TOP))
            if rest:
                out.append(f"  {label}\t  (the other {len(counts) - TOP})\t{100 * rest / len(rows):.1f}%\t{rest}")
        return out
