"""Who may use the device when: many slots check outputs at once; timed device work runs alone.

Timing is only worth its confidence interval if nothing else runs on the device meanwhile: not
another slot's check calls, not the float64 references the parent computes on the device. A timed
call keeps the device busy for well under a millisecond of the 5 ms its round trip takes (H200 run
36: 0.07 ms of kernels, with the L2 flush and the synchronise about 0.5 ms); the rest is host work
(drawing the inputs, launching, the interpreter check, the parent's checks). So the lock has three
kinds of holder, admitted in batches in the order they asked (a kind waiting stops newcomers of
another kind, so neither starves):

- `shared`: check work (check calls, references, fetches): any number at once.
- `loop`: a slot's timing loop for one size. Any number of loops at once, never beside check work.
  Inside, a loop's device work is taken window by window (`window(kind)`), of two kinds:
  - `device`: a timed call's device interval, from the parent's opening of its launch gate to the
    worker's report that the device is done. Taken alone: nothing else of the grader runs on the
    device meanwhile.
  - `draw`: the untimed device work around it. A gated call's preparation, from its message to the
    worker's word that its gate is closed (parking a thread, drawing and synchronising the inputs, the
    poison), and an ungated call of the loop whole (warm-up pairs, the traced call). Any number of
    draws at once, never beside a `device` window.
  So the loops of several slots interleave their calls: one slot's host work (launching its call
  behind the closed gate, the interpreter check, the parent's checks, the reply) overlaps another's
  windows, and no device interval overlaps any other device work of the grader. Before grader 0.13.0
  a gated call was one window from its message to "done" (H200 run 43: 3.4 ms a window, of which
  0.05-0.07 ms were the call's kernels).
- `check` (grader 0.15.0, `Effort.check_windows`): one piece of check work beside the loops. It takes a place
  of kind `loop`, so it never runs beside an `exclusive` holder, and in it one `draw` window, so it never runs
  beside a timed call's device interval. Check work then interleaves with the timing loops window by window,
  and neither waits for the other's whole phase (H200 run 50: a size's shared hold waited 1.83 s for the loops
  to give way, and loops gave way 569 times). `shared` is the hold of 0.14.0 and before.
- `exclusive`: a timing loop that cannot split its device work into windows (the CPU, whose timing
  is the host's; a worker without a launch gate; inputs a task makes itself), and, with
  `interleave=False`, every loop: the device to itself for the whole size.

Device windows go first (`device_first`, grader 0.15.0): a device window waits only for the draws that hold, and
no draw comes in while one waits, so the device windows asked for while draws drain run back to back once they
have. In the order asked (0.13.0 and 0.14.0) each device window behind a draw waited for a drain of its own (H200
run 52: 21,214 device windows of 1.5 ms each, and a timed call waited 13.5 ms for its gate to open). Draws cannot
starve: a timed call's device window comes after its own draw, so at most one device window per loop waits while
the draws wait.

A timing loop gives way (`give_way`) between pairs, once it has held the device `Effort.give_way_s`, when others
wait: it goes to the back of the queue, so a slow attempt's long loop never holds the other slots' check work off
for its whole size (H200 run 39: that convoy made a grade's correctness phase wait 51 s). `stats()` says how the
device's time was split among the holders, for the acceptance run.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from contextlib import contextmanager

KINDS = ("shared", "loop", "exclusive")
WINDOW_KINDS = ("draw", "device")


class _Ticket:
    """One waiter's place in the queue: equal only to itself (two waiters of one kind are two places)."""

    __slots__ = ("kind",)

    def __init__(self, kind: str):
        self.kind = kind


class _Turns:
    """Holders of several kinds, admitted in batches in the order they asked: a waiter comes in when every
    ticket ahead of it is of its kind and nobody of another kind holds; a kind in `alone` comes in one at a
    time. A kind in `first` goes before the others: its waiters pass every waiter of another kind, and no
    waiter of another kind comes in while one of it waits. Its methods are called under `cond`."""

    def __init__(self, kinds: tuple, alone: tuple, cond: threading.Condition, first: tuple = (),
                 changed=None):
        self.cond = cond
        self.held = dict.fromkeys(kinds, 0)
        self.queue: deque[_Ticket] = deque()  # in the order they asked
        self.alone = frozenset(alone)
        self.first = frozenset(first)
        self.changed = changed or (lambda: None)  # called under `cond` before each change of `held` or `queue`

    def _admissible(self, ticket: _Ticket) -> bool:
        kind = ticket.kind
        if kind not in self.first and any(t.kind in self.first for t in self.queue):
            return False
        for ahead in self.queue:  # every ticket ahead of this one is of its kind: one batch
            if ahead is ticket:
                break
            if kind in self.first and ahead.kind not in self.first:  # passed
                continue
            if ahead.kind != kind or kind in self.alone:
                return False
        others = sum(n for k, n in self.held.items() if k != kind)
        return not others and not (kind in self.alone and self.held[kind])

    def acquire(self, kind: str) -> None:
        """Wait for a place of `kind` in the order asked, and take it."""
        ticket = _Ticket(kind)
        self.changed()
        self.queue.append(ticket)
        try:
            while not self._admissible(ticket):
                self.cond.wait()
        finally:
            self.changed()
            self.queue.remove(ticket)
        self.held[kind] += 1
        self.cond.notify_all()  # the rest of this batch may come in too

    def release(self, kind: str) -> None:
        self.changed()
        self.held[kind] -= 1
        self.cond.notify_all()


class DeviceLock:
    def __init__(self, interleave: bool = True, device_first: bool = True):
        self.interleave = interleave
        self._cond = threading.Condition()
        self._turns = _Turns(KINDS, ("exclusive",), self._cond)
        self._held, self._queue = self._turns.held, self._turns.queue
        self._windows = _Turns(WINDOW_KINDS, ("device",), threading.Condition(),
                               first=("device",) if device_first else (), changed=self._windows_changed)
        self._w_since = time.monotonic()
        self._w_spans = dict.fromkeys(("draws_held", "device_waiting", "device_waiting_on_draws"), 0.0)
        self._draw_labels: dict[str, int] = {}  # the work of the draws held now: label -> holders
        self._blocked_by: dict[str, float] = {}  # a device window's wait on draws, charged to the work holding them
        self._draws_by: dict[str, list] = {}  # each draw's work: [draws, holder-seconds]
        self._since = time.monotonic()
        self._state = "idle"
        self._seconds = dict.fromkeys(KINDS + ("idle",), 0.0)
        self._window_s = dict.fromkeys(WINDOW_KINDS + ("check",), 0.0)  # check: the draw windows of `check`
        self._window_n = dict.fromkeys(WINDOW_KINDS + ("check",), 0)
        self._gave_way = 0
        self._purposes: dict[str, tuple[int, float]] = {}

    def _windows_changed(self) -> None:
        """Charge the time since the windows last changed to what was true meanwhile (under the windows'
        condition): some draw held (any number at once: the wall time they cover, not holder-seconds), a device
        window waiting, and both at once (a timed call held off by draws: what makes the loops wait), the last
        split among the draws held meanwhile by their work's label (`window`), equal shares per holder."""
        now = time.monotonic()
        w, dt = self._windows, now - self._w_since
        self._w_since = now
        draws, waiting = w.held["draw"] > 0, any(t.kind == "device" for t in w.queue)
        self._w_spans["draws_held"] += dt * draws
        self._w_spans["device_waiting"] += dt * waiting
        self._w_spans["device_waiting_on_draws"] += dt * (draws and waiting)
        holders = sum(self._draw_labels.values())
        if draws and waiting and holders:
            for label, n in self._draw_labels.items():
                self._blocked_by[label] = self._blocked_by.get(label, 0.0) + dt * n / holders

    def _account(self) -> None:
        """Charge the time since the last change to the state the device was in (called under the lock)."""
        now = time.monotonic()
        self._seconds[self._state] += now - self._since
        self._since = now
        self._state = next((k for k in KINDS if self._held[k]), "idle")

    def _acquire(self, kind: str) -> None:
        """Wait for a place of `kind` in the order asked, and take it (under the condition)."""
        self._turns.acquire(kind)
        self._account()

    def _release(self, kind: str) -> None:
        self._turns.release(kind)
        self._account()

    @contextmanager
    def _take(self, kind: str, purpose: str = "", draw: str = "", label: str = ""):
        """A place of `kind`, and in it a draw window counted under `draw` when named, its work called `label` (else
        `purpose`); `purpose` names the hold in `stats()`, its wait the wait for both."""
        t = time.monotonic()
        with self._cond:
            self._acquire(kind)
        try:
            with self.window("draw", stat=draw, label=label or purpose) if draw else contextlib.nullcontext():
                waited, t = time.monotonic() - t, time.monotonic()
                try:
                    yield
                finally:
                    if purpose:  # holder-seconds: holds of one kind overlap, so these add up past the wall clock
                        self.note(purpose, time.monotonic() - t)
                        self.note(f"{purpose}: waiting for the hold", waited)
        finally:
            with self._cond:
                self._release(kind)

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

    def note(self, purpose: str, seconds: float) -> None:
        """Count `seconds` of one piece of work under `purpose` in `stats()` without a hold of its own: the parts of
        a shared hold (a verification's fetch, reference, comparison), to show where check work spends the device's
        time."""
        with self._cond:
            n, held = self._purposes.get(purpose, (0, 0.0))
            self._purposes[purpose] = (n + 1, held + seconds)

    def shared(self, purpose: str = ""):
        """Check calls and references: any number at once, never during timing. `purpose` names the work in
        `stats()`."""
        return self._take("shared", purpose)

    def check(self, purpose: str = "", label: str = "", whole: bool = True):
        """One piece of check work beside the timing loops: a place of kind `loop` (never beside `exclusive`) and
        in it a draw window (never beside a `device` window), counted apart from the loops' own draws. Never
        taken inside a loop's hold or a window: a second place behind a waiter of another kind would wait for
        itself. `purpose` names the hold in `stats()`; `label` its work, where device windows wait on it (else
        `purpose`). Not `whole`: the place alone, in which the holder takes its own draw windows
        (`window("draw", stat="check", ...)`: a gated check call's two, `session._gated_check_call`)."""
        return self._take("loop", purpose, draw="check" if whole else "", label=label)

    def exclusive(self):
        """A timing loop that holds the device alone for the whole size."""
        return self._take("exclusive")

    def loop(self):
        """A timing loop whose device work is taken window by window (`window`); with interleave off, `exclusive`."""
        return self._take("loop" if self.interleave else "exclusive")

    @contextmanager
    def window(self, kind: str = "device", stat: str = "", label: str = ""):
        """One window of a loop's device work, only inside `loop()`: `device` (a timed call's device interval)
        alone, `draw` (untimed device work) beside other draws; never the two kinds at once. `stat`: the name its
        time is counted under in `stats()`, if not its kind's. `label`: a draw's work, to which the waits of device
        windows are charged while it holds (`stats()["blocked_by"]`; else its `stat` or kind)."""
        turns = self._windows
        label = (label or stat or kind) if kind == "draw" else ""
        with turns.cond:
            turns.acquire(kind)
            if label:  # under the condition the acquire changed `held` under: no change comes between
                self._draw_labels[label] = self._draw_labels.get(label, 0) + 1
        t = time.monotonic()
        try:
            yield
        finally:
            with turns.cond:
                turns.release(kind)  # charges the time up to now to the labels held, this one among them
                took = time.monotonic() - t
                if label:
                    self._draw_labels[label] -= 1
                    if not self._draw_labels[label]:
                        del self._draw_labels[label]
                    n_s = self._draws_by.setdefault(label, [0, 0.0])
                    n_s[0] += 1
                    n_s[1] += took
                self._window_s[stat or kind] += took
                self._window_n[stat or kind] += 1

    def state(self) -> dict:
        """Who holds the lock and its windows now and who waits for each, for a stalled run's record."""
        with self._cond:
            held, waiting = dict(self._held), [t.kind for t in self._queue]
        with self._windows.cond:
            windows, windows_waiting = dict(self._windows.held), [t.kind for t in self._windows.queue]
        return {"held": held, "waiting": waiting, "windows": windows, "windows_waiting": windows_waiting}

    def stats(self) -> dict:
        """Seconds the device spent in each state since the lock was made (idle: nobody held it), the device
        windows the loops took (count, seconds), their draw windows and check work's (`check`; count,
        holder-seconds: draws overlap), the wall time some draw held, a device window waited, and both
        (`_windows_changed`), that last by the work of the draws it waited on (`blocked_by`, seconds), the draws
        by their work (`draws_by`: [draws, holder-seconds]), the times
        loops gave way, and per named purpose of a shared hold or a check window [holds, holder-seconds]."""
        with self._windows.cond:
            count, seconds = dict(self._window_n), dict(self._window_s)
            self._windows_changed()
            spans = dict(self._w_spans)
            blocked = {k: round(v, 3) for k, v in self._blocked_by.items()}  # ranked where printed (`lock_lines`)
            draws_by = {k: [n, round(v, 3)] for k, (n, v) in self._draws_by.items()}
        with self._cond:
            self._account()
            return {**{f"{k}_s": round(v, 3) for k, v in self._seconds.items()},
                    "windows": count["device"], "window_s": round(seconds["device"], 3),
                    "draw_windows": count["draw"], "draw_window_s": round(seconds["draw"], 3),
                    "check_windows": count["check"], "check_window_s": round(seconds["check"], 3),
                    **{f"{k}_s": round(v, 3) for k, v in spans.items()},
                    "blocked_by": blocked, "draws_by": draws_by,
                    "gave_way": self._gave_way,
                    "purposes": {k: [n, round(s, 3)] for k, (n, s) in sorted(self._purposes.items())}}

