"""Whether a worker that has not answered yet is still working or hangs (`Effort.hang_watch`).

A hang waits out the attempt's whole budget (`GradeRequest.timeout_s`, 60 s): the demo's spin (`while not _ready:
pass` in its call) held its slot 60.2 s of round 1's 404 slot-seconds on H100 run 136, 15% of them. What the kernel
counts of the worker tells a hang apart from work: compiling reads and writes files, faults in the memory it grows
into, starts the compiler and waits for it (a live child is work); a thread that waits by turns (a poll with a
sleep) switches each time. A spin (in Python, or in a device synchronisation on a kernel that never ends) and a
wait that nothing ends (an event no thread will set: the demo's other hang) move none of those counts. The threads
the worker had before the request (its own and its device driver's) wake on their own: they count by their faults
and their reads and writes only, and as work whenever one is seen running.

The counts are the kernel's: the candidate can move them (and so keep the budget it had without the watch), never
stop them moving while it works. The watch only ever ends a request sooner that would otherwise have run on, and
only one whose threads have moved no count for `Effort.hang_idle_s`: a call that long at any size puts an attempt
hundreds of times past the clip, and its grade, which makes several such calls, past its budget anyway. An
unreadable count (a worker that has ended) ends the watch: its reply, or its end, is read as before.
"""
from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass, field

from grader.sandbox import stat_fields, thread_ids

POLL_S = 0.2
"""How often the counts are read while the reply has not begun."""


_IO = (b"rchar", b"wchar", b"syscr", b"syscw")

MAX_THREADS = 256
"""A worker with more threads than this is taken as working, unread: its hang, if it is one, waits out the budget."""


MANY = ("many threads",)
"""How a mark of more than `MAX_THREADS` threads begins (`mark`)."""

COUNTS = ("minor faults", "major faults", "children's user time", "children's system time")
"""The stat counts a mark holds for each thread after its id (`mark`), by name for the record (`moved`)."""

MOVED_SHOWN = 6
"""The most differences between two marks a watch's record names (`moved`)."""


def mark(pid: int, before: set[str]) -> tuple[bool, tuple] | None:
    """Process `pid`'s work as the kernel counts it: whether one of the threads the watch is for (its main thread,
    and each it started since `before`: the candidate's) runs, and a mark that moves with any work, None when the
    main thread's stat cannot be read (it has ended). The mark holds every thread's page faults and reads and writes
    (bytes and calls; left out where a thread's io file cannot be read), the children's reaped CPU time, and the
    watched threads' voluntary switches (a thread that waits by turns switches each time). The threads it had at
    `before` (the worker's and its device driver's, which may wake on their own) count by their faults and their
    reads and writes only, and as work whenever one is seen running; a live child (a compiler) is work all along."""
    running, counts, now = False, [], thread_ids(pid)
    if str(pid) not in now:
        return None
    if len(now) > MAX_THREADS:  # read as work: the watch's readings stay cheap whatever the candidate starts
        return True, (*MANY, time.monotonic())
    for tid in sorted(now):
        base = f"/proc/{pid}/task/{tid}"
        watched = tid == str(pid) or tid not in before
        try:
            fields = stat_fields(f"{base}/stat")
            with open(f"{base}/children", "rb") as f:
                children = f.read().split()
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
        if children or (not watched and fields[0] == "R"):
            return running, (*counts, (tid, "working", time.monotonic()))  # never equal to another mark
        running = running or fields[0] == "R"
        counts.append((tid, *(fields[k - 3] for k in (10, 12, 16, 17)), *(switches if watched else ()), *io))
    return running, tuple(counts)


def moved(old: tuple, new: tuple, pid: int, before: set[str]) -> list[str]:
    """What differs between two marks (`mark`), for the record: `<thread>: <what>`, the thread `main` (the worker's
    main thread), `new` (started for the request) or `old` (the worker's before it, or its device driver's); at most
    `MOVED_SHOWN` of them. A count of `/proc/.../status` or `io` is named by its field (`voluntary_ctxt_switches`,
    `rchar`)."""
    def who(tid: str) -> str:
        return "main" if tid == str(pid) else "new" if tid not in before else "old"

    if MANY in (old[1][:1], new[1][:1]):
        return [f"more than {MAX_THREADS} threads"]
    was = {entry[0]: entry for entry in old[1]}
    out = ["running" if new[0] else "no longer running"] if old[0] != new[0] else []
    for entry in new[1]:
        tid = entry[0]
        if entry[1:2] in (("working",), ("ended",)):
            out.append(f"{who(tid)}: {'a live child, or running' if entry[1] == 'working' else 'ended'}")
        elif tid not in was:
            out.append(f"{who(tid)}: started")
        else:
            for k, (a, b) in enumerate(zip(was[tid][1:], entry[1:])):
                if a != b:
                    out.append(f"{who(tid)}: {COUNTS[k] if k < len(COUNTS) else b.split(b':')[0].decode()}")
    if not any(entry[1:2] == ("working",) for entry in new[1]):  # a mark ends at the first thread at work
        out += [f"{who(tid)}: gone" for tid in sorted(set(was) - {entry[0] for entry in new[1]})]
    return out[:MOVED_SHOWN]


@dataclass
class Watch:
    """The watch of one request to a worker, made before it is sent: `wait` until its reply begins, or until the
    worker has moved no count of work (`mark`) for `idle_s`. What it saw is kept for the grade's record (`record`)."""

    pid: int
    idle_s: float
    longest_still_s: float = 0.0
    changes: int = 0
    polls: int = 0
    unreadable: bool = False
    still: bool = False
    running: bool = False
    """Whether a watched thread ran at the last reading: a spin, where a wait that nothing ends has none running."""
    last_change_s: float | None = None
    """When its last change was read, from the watch's start."""
    last_change: tuple | None = None
    """The two marks of that change, named in the record (`moved`): H100 run 140's spin went still only 11 s in, from
    no count the record named."""

    before: set[str] = field(init=False)
    """The worker's threads as the watch is made, before the request is sent: those it starts for it are watched."""

    def __post_init__(self) -> None:
        self.before = thread_ids(self.pid)

    def wait(self, sock: socket.socket, timeout_s: float, also: socket.socket | None = None) -> bool:
        """True once `sock` (or `also`) has something to read, the counts cannot be read, or `timeout_s` has passed (the
        reply is then read as without the watch); False when the worker has moved no count of work for `idle_s`."""
        t_start = time.monotonic()
        t_end = t_start + timeout_s
        last, t_last = mark(self.pid, self.before), time.monotonic()
        socks = [sock] if also is None else [sock, also]
        while True:
            left = t_end - time.monotonic()
            if left <= 0 or select.select(socks, [], [], min(POLL_S, left))[0]:
                return True
            now_mark = mark(self.pid, self.before)
            now = time.monotonic()
            self.polls += 1
            if now_mark is None or last is None:
                self.unreadable = True
                return True
            self.running = now_mark[0]
            if now_mark != last:  # it worked
                self.last_change, self.last_change_s = (last, now_mark), now - t_start
                last, t_last = now_mark, now
                self.changes += 1
            self.longest_still_s = max(self.longest_still_s, now - t_last)
            if now - t_last >= self.idle_s:
                self.still = True
                return False

    def record(self) -> dict:
        return {"idle_s": self.idle_s, "longest_still_s": round(self.longest_still_s, 3), "changes": self.changes,
                "polls": self.polls, **({"unreadable": True} if self.unreadable else {}),
                **({"last_change_s": round(self.last_change_s, 3),
                    "last_moved": moved(*self.last_change, self.pid, self.before)} if self.last_change else {}),
                **({"still": "spinning" if self.running else "waiting"} if self.still else {})}
