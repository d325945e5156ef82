"""`Effort.hang_watch`: an attempt's load and first call end as a timeout once its worker has moved none of the
kernel's counts of work for `Effort.hang_idle_s` (`grader.hangwatch`), a spin or a wait that nothing ends, not only at
the attempt's budget. Work, and a wait on a child at work (a compiler), are never taken for a hang."""
from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import time

import pytest

from bench.gpu_acceptance import hang_watch_line
from grader import hangwatch
from grader.contract import GradeRequest, Reason, Status
from grader.service import GraderService
from grader.session import Effort
from tests.grader.sources import HONEST_SOFTMAX

SPIN = "while True:\n    pass\n"
SLEEP = "import time\ntime.sleep(60)\n"
CHILD = "import subprocess\nsubprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
WORK = "import os\nfd = os.open('/dev/null', os.O_WRONLY)\nwhile True:\n    os.write(fd, b'x')\n"


@pytest.fixture
def started():
    procs = []

    def start(body: str) -> int:
        p = subprocess.Popen([sys.executable, "-c", "import sys\nprint('go', flush=True)\n" + body],
                             stdout=subprocess.PIPE)
        procs.append(p)
        assert p.stdout.readline() == b"go\n"
        return p.pid
    yield start
    for p in procs:
        p.kill()
        p.wait()


def _wait(pid: int, idle_s: float, timeout_s: float) -> tuple[bool, float, hangwatch.Watch]:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        watch = hangwatch.Watch(pid, idle_s)
        t = time.monotonic()
        answered = watch.wait(ours, timeout_s)
        return answered, time.monotonic() - t, watch


@pytest.mark.parametrize("body, how", [(SPIN, "spinning"), (SLEEP, "waiting")], ids=["spins", "sleeps"])
def test_a_spin_or_a_wait_nothing_ends_ends_the_wait_at_the_idle_time(started, body, how):
    answered, took, watch = _wait(started(body), 1.0, 20.0)
    assert not answered and watch.still
    assert 1.0 <= took < 5.0, took
    assert watch.record()["still"] == how and watch.record()["longest_still_s"] >= 1.0


@pytest.mark.parametrize("body", [WORK, CHILD], ids=["works", "waits on a child"])
def test_work_or_a_child_at_work_is_no_hang(started, body):
    """A thread writing moves its counts; a live child (a compiler) is work: either waits out the caller's timeout."""
    answered, took, watch = _wait(started(body), 0.5, 2.5)
    assert answered and not watch.still
    assert took >= 2.4, took


def test_a_reply_or_an_ended_worker_ends_the_wait_at_once(started):
    pid = started(SPIN)
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.send(b"x")
        assert hangwatch.Watch(pid, 1.0).wait(ours, 10.0)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    t = time.monotonic()
    answered, _, watch = _wait(int(done.stdout), 1.0, 10.0)
    assert answered and watch.unreadable and time.monotonic() - t < 1.0


ATTEMPTS = {  # name: (source, status, the reason's words)
    "spins in its call": ("import torch\n_ready = False\n\ndef run(x):\n    while not _ready:\n        pass\n"
                          "    return x\n", Status.TIMEOUT, "its first call made no progress for 2 s"),
    "spins as it loads": ("import torch\n" + SPIN + "def run(x):\n    return x\n", Status.TIMEOUT,
                          "its load made no progress for 2 s"),
    "waits on an event nothing sets": ("import threading\nimport torch\n_ready = threading.Event()\n\n"
                                       "def run(x):\n    _ready.wait()\n    return x\n", Status.TIMEOUT,
                                       "its first call made no progress for 2 s"),
    "waits on a child in its first call": (HONEST_SOFTMAX.replace(
        "def run(x):\n", "import subprocess\nimport sys\n_waited = []\n\ndef run(x):\n    if not _waited:\n"
        "        subprocess.run([sys.executable, '-c', 'import time; time.sleep(3.5)'], check=True)\n"
        "        _waited.append(1)\n"), Status.CORRECT, "correct"),
    "honest": (HONEST_SOFTMAX, Status.CORRECT, "correct"),
    "polls forever": ("import time\nimport torch\n\ndef run(x):\n    while True:\n        time.sleep(0.05)\n",
                      Status.TIMEOUT, "6 s budget"),
}
BUDGET_S = {"polls forever": 6.0}
"""A hang that moves its counts (each sleep a switch) is no spin to the watch: it ends at its budget, not later."""
REACHES_THEN_WORKS = ("import threading\nimport time\nimport torch\n\ndef run(x):\n"
                      "    threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
                      "    t = time.monotonic()\n    while time.monotonic() - t < 12:\n        time.sleep(0.02)\n"
                      "    return x\n")
"""A first call that starts a thread, which its audit channel reports at once, then works on for 12 s (each sleep a
switch: no hang)."""


@pytest.fixture(scope="module")
def graded():
    effort = dataclasses.replace(Effort.for_device(False), hang_idle_s=2.0)
    with GraderService(mode="zygote", workers=1, effort=effort) as svc:
        yield {name: svc.grade_one(GradeRequest(attempt_id=name, task_id="softmax_rows_fp32", source=src,
                                                language="pytorch", timeout_s=BUDGET_S.get(name, 45.0)))
               for name, (src, _, _) in {**ATTEMPTS, "reaches then works": (REACHES_THEN_WORKS, None, None)}.items()}


@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_a_spin_is_a_timeout_long_before_the_budget_and_a_wait_is_not(graded, name):
    _, status, words = ATTEMPTS[name]
    r = graded[name]
    assert (r.status, words in r.reason) == (status, True), (r.status, r.reason)
    assert r.reason_code is (Reason.TIMEOUT if status is Status.TIMEOUT else Reason.OK)
    watched = r.sandbox["hang_watch"]
    if name in BUDGET_S:  # the watch waited the budget out: the reply was then given what was left, not as much again
        assert r.phase_seconds["total"] < BUDGET_S[name] + 3.0, r.phase_seconds
        assert not any(w.get("still") for w in watched.values()), watched
    elif status is Status.TIMEOUT:
        assert r.phase_seconds["total"] < 20.0, r.phase_seconds  # the budget was 45 s
        assert watched["load" if "loads" in name else "first call"]["still"] == ("waiting" if "event" in name
                                                                                else "spinning"), watched
    else:
        assert set(watched) == {"load", "first call"} and not any(w.get("still") for w in watched.values())


def test_on_by_default_and_off_nothing_is_watched():
    assert Effort().hang_watch and Effort.for_device(False).hang_watch
    with GraderService(mode="zygote", workers=1, hang_watch=False) as svc:
        r = svc.grade_one(GradeRequest(attempt_id="honest", task_id="softmax_rows_fp32", source=HONEST_SOFTMAX,
                                       language="pytorch"))
    assert r.status is Status.CORRECT and "hang_watch" not in r.sandbox


def test_a_line_on_the_audit_channel_floors_the_grade_without_waiting_for_the_call(graded):
    """Any line the worker's audit channel carries floors the grade however the call ends (`_check_guards`), so the
    watch of a compiling call ends it at the first: the call here would have run 12 s more (H100 and CPU alike, a
    cheat compiled by inductor took 15.7 s on two cores to be flagged for the thread it started)."""
    r = graded["reaches then works"]
    assert (r.status, r.reason_code) == (Status.CHEAT_FLAGGED, Reason.THREADS), (r.status, r.reason)
    assert r.reason.startswith("the candidate started a thread"), r.reason
    assert r.phase_seconds["total"] < 8.0, r.phase_seconds


def test_the_acceptance_names_what_the_watch_ended_and_how_still_the_rest_ran(graded):
    line = hang_watch_line([r for name, r in graded.items() if name in ATTEMPTS])
    assert "11 requests of 6 grades; ended 3: " in line, line  # a load that spins has no first call
    assert "spins in its call timeout in " in line and "spins as it loads timeout in " in line, line
    assert "waits on an event nothing sets timeout in " in line, line
    assert line.count(" s in: ") == 3, line  # each ended one's last change, and what moved then
    assert "the others' longest still stretch median " in line, line
    assert hang_watch_line([]) is None


def test_a_worker_of_more_threads_than_the_watch_reads_is_taken_as_working(started, monkeypatch):
    """The readings stay cheap whatever the candidate starts: past `MAX_THREADS` the worker is not read, and its
    spin, if it is one, waits out the budget as without the watch."""
    monkeypatch.setattr(hangwatch, "MAX_THREADS", 2)
    pid = started("import threading\nfor _ in range(3):\n    threading.Thread(target=lambda: threading.Event().wait(), "
                  "daemon=True).start()\n" + SPIN)
    answered, took, watch = _wait(pid, 0.5, 2.0)
    assert answered and not watch.still and took >= 1.9


def test_the_record_names_what_moved_last_and_when(started):
    """What the last change was (`hangwatch.moved`), for a hang that went still late: here a main thread's writes."""
    answered, _, watch = _wait(started(WORK), 0.5, 1.0)
    record = watch.record()
    assert answered and 0.0 < record["last_change_s"] <= 1.2, record
    assert {"main: wchar", "main: syscw"} <= set(record["last_moved"]), record
    assert "last_moved" not in hangwatch.Watch(started(SPIN), 1.0).record()  # nothing read yet, nothing named


def test_moved_names_each_thread_by_its_place_and_each_count_by_its_field():
    before = {"10", "11"}
    old = (False, (("10", 5, 0, 0, 0, b"voluntary_ctxt_switches:\t3", b"rchar: 1"), ("11", 1, 0, 0, 0, b"rchar: 9")))
    new = (True, (("10", 6, 0, 0, 0, b"voluntary_ctxt_switches:\t4", b"rchar: 1"), ("12", "ended")))
    assert hangwatch.moved(old, new, 10, before) == ["running", "main: minor faults", "main: voluntary_ctxt_switches",
                                                     "new: ended", "old: gone"]
    started_one = (False, (*old[1], ("12", 0, 0, 0, 0)))
    assert hangwatch.moved(old, started_one, 10, before) == ["new: started"]
    working = (False, (old[1][0], ("11", "working", 1.0)))  # a mark ends at a thread at work: the rest is not gone
    assert hangwatch.moved(old, working, 10, before) == ["old: a live child, or running"]
    assert hangwatch.moved(old, (True, (*hangwatch.MANY, 1.0)), 10, before) == ["more than 256 threads"]


def test_a_flooded_audit_channel_is_read_a_bounded_share_at_a_time():
    """The watch drains the audit channel while the candidate runs: a process that writes raw bytes to it without end
    must not grow the parent's lines without bound, nor hold its read, in one drain (without the cap one drain here
    read 479 MB of lines over about 15 s on two cores, 2026-12-07)."""
    import os

    from grader.launcher import AUDIT_DRAIN_CAP, WorkerConn

    ours, theirs = socket.socketpair()
    flood = subprocess.Popen([sys.executable, "-c", "import os, sys, time\nfd = int(sys.argv[1])\n"
                              "chunk = b'sandbox\\tx\\n' * 6554\nend = time.monotonic() + 20\n"
                              "while time.monotonic() < end:\n    os.write(fd, chunk)\n", str(theirs.fileno())],
                             pass_fds=(theirs.fileno(),))
    try:
        time.sleep(0.3)
        conn = WorkerConn(sock=ours, audit=ours, pid=os.getpid())
        t0 = time.monotonic()
        lines = conn.drain_audit()
        took = time.monotonic() - t0
    finally:
        flood.kill()
        flood.wait()
        ours.close()
        theirs.close()
    assert lines and lines[0] == "sandbox\tx"
    assert sum(len(line) + 1 for line in lines) <= min(AUDIT_DRAIN_CAP + (1 << 16), 2 << 20), len(lines)
    assert took < 2.0, took
