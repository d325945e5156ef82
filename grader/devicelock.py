"""Who may use the device when: many slots check outputs at once; timed device work runs alone.

Timing is only worth its confidence interval if nothing else runs on the device meanwhile: not
another slot's check calls, not the float64 references the parent computes on the device. A timed
call keeps the device busy for well under a millisecond of the 5 ms its round trip takes (H200 run
36: 0.07 ms of kernels, with the L2 flush and the synchronise about 0.5 ms); the rest is host work
(drawing the inputs, launching, the interpreter check, the parent's checks). So the lock has three
kinds of holder, admitted in batches in the order they asked (a kind waiting stops newcomers of
another kind, so neither starves):

- `shared`: check work (check calls, references, fetches): any number at once.
- `loop`: a slot's timing loop for one size. Any number of loops at once, never beside check work;
  each device window of a loop (`window()`: a gated call from its message to the worker's report
  that the device is done, or an ungated call of the loop whole) is taken alone. So the loops of
  several slots interleave their calls: one slot's host work (the interpreter check, the parent's
  checks, the reply) overlaps another's window, no window overlaps any other device work of the
  grader, and only the window's worker ever has its launch gate closed.
- `exclusive`: a timing loop that cannot split its device work into windows (the CPU, whose timing
  is the host's; a worker without a launch gate; inputs a task makes itself), and, with
  `interleave=False`, every loop: the device to itself for the whole size.

A timing loop of many pairs gives way (`give_way`) every few pairs when others wait: it goes to the back of the
queue, so a slow attempt's long loop never holds the other slots' check work off for its whole size (H200 run 39:
that convoy made a grade's correctness phase wait 51 s). `stats()` says how the device's time was split among the
holders, for the acceptance run.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager

KINDS = ("shared", "loop", "exclusive")


class _Ticket:
    """One waiter's place in the queue: equal only to itself (two waiters of one kind are two places)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind


class DeviceLock:
    def __init__(self, interleave: bool = True):
        self.interleave = interleave
        self._cond = threading.Condition()
        self._held = dict.fromkeys(KINDS, 0)
        self._queue: deque[_Ticket] = deque()  # in the order they asked
        self._window = threading.Lock()
        self._since = time.monotonic()
        self._state = "idle"
        self._seconds = dict.fromkeys(KINDS + ("idle",), 0.0)
        self._window_s = 0.0
        self._windows = 0
        self._gave_way = 0
        self._purposes: dict[str, tuple[int, float]] = {}

    def _admissible(self, ticket: _Ticket) -> bool:
        kind = ticket.kind
        for ahead in self._queue:  # every ticket ahead of this one is of its kind: one batch
            if ahead is ticket:
                break
            if ahead.kind != kind or kind == "exclusive":
                return False
        others = sum(n for k, n in self._held.items() if k != kind)
        return not others and not (kind == "exclusive" and self._held["exclusive"])

    def _account(self) -> None:
        """Charge the time since the last change to the state the device was in (called under the lock)."""
        now = time.monotonic()
        self._seconds[self._state] += now - self._since
        self._since = now
        self._state = next((k for k in KINDS if self._held[k]), "idle")

    def _acquire(self, kind: str) -> None:
        """Wait for a place of `kind` in the order asked, and take it (under the condition)."""
        ticket = _Ticket(kind)
        self._queue.append(ticket)
        try:
            while not self._admissible(ticket):
                self._cond.wait()
        finally:
            self._queue.remove(ticket)
        self._held[kind] += 1
        self._account()
        self._cond.notify_all()  # the rest of this batch may come in too

    def _release(self, kind: str) -> None:
        self._held[kind] -= 1
        self._account()
        self._cond.notify_all()

    @contextmanager
    def _take(self, kind: str, purpose: str = ""):
        with self._cond:
            self._acquire(kind)
        t = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self._release(kind)
                if purpose:  # holder-seconds: holds of one kind overlap, so these add up past the wall clock
                    n, held = self._purposes.get(purpose, (0, 0.0))
                    self._purposes[purpose] = (n + 1, held + time.monotonic() - t)

    def give_way(self, kind: str) -> float:
        """For a holder of `kind` (as asked: `loop` is `exclusive` with interleave off) between two pieces of its
        work: when anyone waits (a waiter always waits on a holder of another kind, or, for `exclusive`, on this
        one), let the waiters ahead go first and take a place again behind them. Returns the seconds that took;
        0.0 when nobody waited. A long timing loop thus never holds other slots' check work for its whole size."""
        if kind == "loop" and not self.interleave:
            kind = "exclusive"
        with self._cond:
            if not self._queue:
                return 0.0
            t = time.monotonic()
            self._release(kind)
            self._acquire(kind)
            self._gave_way += 1
            return time.monotonic() - t

    def shared(self, purpose: str = ""):
        """Check calls and references: any number at once, never during timing. `purpose` names the work in
        `stats()`."""
        return self._take("shared", purpose)

    def exclusive(self):
        """A timing loop that holds the device alone for the whole size."""
        return self._take("exclusive")

    def loop(self):
        """A timing loop whose device work is taken window by window (`window`); with interleave off, `exclusive`."""
        return self._take("loop" if self.interleave else "exclusive")

    @contextmanager
    def window(self):
        """One device window of a loop: no other loop's device work runs meanwhile. Only inside `loop()`."""
        with self._window:
            t = time.monotonic()
            try:
                yield
            finally:
                self._window_s += time.monotonic() - t
                self._windows += 1

    def state(self) -> dict:
        """Who holds the lock now and who waits, for a stalled run's record."""
        with self._cond:
            return {"held": dict(self._held), "waiting": [t.kind for t in self._queue],
                    "window_taken": self._window.locked()}

    def stats(self) -> dict:
        """Seconds the device spent in each state since the lock was made (idle: nobody held it), the windows the
        loops took (count, seconds), the times loops gave way, and per named purpose of a shared hold [holds,
        holder-seconds]."""
        with self._cond:
            self._account()
            return {**{f"{k}_s": round(v, 3) for k, v in self._seconds.items()},
                    "windows": self._windows, "window_s": round(self._window_s, 3), "gave_way": self._gave_way,
                    "purposes": {k: [n, round(s, 3)] for k, (n, s) in sorted(self._purposes.items())}}

