"""Whether a worker that has not answered yet is still working or only spinning (`Effort.hang_watch`).

A hang waits out the attempt's whole budget (`GradeRequest.timeout_s`, 60 s): the demo's spin (`while not _ready:
pass` in its call) held its slot 60.2 s of round 1's 404 slot-seconds on H100 run 136, 15% of them. What the kernel
counts of the worker's threads (its main thread, and those it started for the request: the candidate's code runs on
a thread of its own, `boundary.CandidateRunner`) tells a spin apart from work: compiling reads and writes files,
starts the compiler, faults in the memory it grows into; a thread that waits (on the compiler, a pipe, a lock, a
sleep) is not running, and the watch takes no wait for a spin however long it lasts. A spin in Python (or in a
device synchronisation on a kernel that never ends) runs all along and moves none of those counts, only its CPU time.

The counts are the kernel's: the candidate can move them (and so keep the budget it had without the watch), never
stop them moving while it works. The watch only ever ends a request sooner that would otherwise have run on, and
only one whose threads have run still for `Effort.hang_idle_s`: a call of that length at any size puts an attempt
hundreds of times past the clip, and its grade, which makes several such calls, past its budget anyway. An
unreadable count (a worker that has ended) ends the watch: its reply, or its end, is read as before.
"""
from __future__ import annotations

import os
import select
import socket
import time
from dataclasses import dataclass

POLL_S = 0.2
"""How often the counts are read while the reply has not begun."""


_IO = (b"rchar", b"wchar", b"syscr", b"syscw")


def threads(pid: int) -> set[str]:
    """The thread ids of process `pid` now (empty once it has ended)."""
    try:
        return set(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return set()


def mark(pid: int, before: set[str]) -> tuple[bool, tuple] | None:
    """Of process `pid`'s main thread and each thread it started since `before` (the threads it had as the watched
    request was sent: those are the worker's and its device driver's, which wake on their own): whether any is
    running (not waiting: a wait on a compiler, a pipe, a lock or a sleep is no spin however long), and what the
    kernel counts of them that work moves and a spin does not: which threads there are, their page faults, the
    children's reaped CPU time, their voluntary context switches, their reads and writes (bytes and calls; left out
    where a thread's io file cannot be read). None when the main thread's stat cannot be read (it has ended)."""
    running, counts = False, []
    for tid in sorted((threads(pid) - before) | {str(pid)}):
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # the name before it may hold anything, spaces included
            with open(f"{base}/status", "rb") as f:
                switches = [line for line in f.read().splitlines() if line.startswith(b"voluntary_ctxt_switches")]
        except (OSError, IndexError):
            if tid == str(pid):
                return None
            counts.append((tid, "ended"))  # a thread that ended as it was read
            continue
        try:
            with open(f"{base}/io", "rb") as f:
                io = [line for line in f.read().splitlines() if line.split(b":")[0] in _IO]
        except OSError:
            io = []
        # fields[k] is stat's field k + 3: state 3, minflt 10, majflt 12, cutime 16, cstime 17
        running = running or fields[0] == b"R"
        counts.append((tid, *(fields[k - 3] for k in (10, 12, 16, 17)), *switches, *io))
    return running, tuple(counts)


@dataclass
class Watch:
    """The watch of one request to a worker, made before it is sent: `wait` until its reply begins, or until the
    threads it watches (`mark`) have run still for `idle_s`. What it saw is kept for the grade's record (`record`)."""

    pid: int
    idle_s: float
    longest_still_s: float = 0.0
    changes: int = 0
    polls: int = 0
    unreadable: bool = False
    still: bool = False

    def __post_init__(self) -> None:
        self.before = threads(self.pid)
        """Made before the watched request is sent, so that the threads the worker starts for it are watched."""

    def wait(self, sock: socket.socket, timeout_s: float) -> bool:
        """True once `sock` has something to read, the counts cannot be read, or `timeout_s` has passed (the reply
        is then read as without the watch); False when the watched threads have run still for `idle_s`."""
        t_end = time.monotonic() + timeout_s
        last, t_last = mark(self.pid, self.before), time.monotonic()
        while True:
            left = t_end - time.monotonic()
            if left <= 0 or select.select([sock], [], [], min(POLL_S, left))[0]:
                return True
            now_mark = mark(self.pid, self.before)
            now = time.monotonic()
            self.polls += 1
            if now_mark is None or last is None:
                self.unreadable = True
                return True
            if now_mark != last or not now_mark[0]:  # it worked, or it waits
                self.changes += now_mark != last
                last, t_last = now_mark, now
            self.longest_still_s = max(self.longest_still_s, now - t_last)
            if now - t_last >= self.idle_s:
                self.still = True
                return False

    def record(self) -> dict:
        return {"idle_s": self.idle_s, "longest_still_s": round(self.longest_still_s, 3), "changes": self.changes,
                "polls": self.polls, **({"unreadable": True} if self.unreadable else {}),
                **({"still": True} if self.still else {})}
