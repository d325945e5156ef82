"""Run a long-lived command (`kerneltraj ui`'s `dagster dev`) so that stopping us stops all of it.

`dagster dev` (as `dg dev`) starts a webserver, a daemon and code servers. Started in the background (`&`, nohup, a
service manager), it inherits an ignored SIGINT, and Dagster maps SIGTERM to SIGINT's handler: it
then ignores both, and its processes outlive the command that started them. So the command runs
in a process group of its own with SIGINT restored; on SIGTERM, SIGINT or SIGHUP we ask it to stop
(SIGINT: `dagster dev` then shuts its webserver and daemon down), give it `grace_s`, and kill what
is left of the group (a code server that lingers, a child that hangs).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Mapping, Sequence

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 3.0
"""How long the command gets to stop by itself before its whole process group is killed."""
KILL_WAIT_S = 1.5
PR_SET_PDEATHSIG = 1


class _Stop(Exception):
    """A stop signal reached us."""


def _child_setup() -> None:
    # In the child, before exec: SIGINT back to its default (so Python turns it into KeyboardInterrupt),
    # and SIGTERM when we die without cleaning up (kill -9), so the command still stops.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the stop signals above still stop the group


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group, read from /proc."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry.name))
    return out


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """Ask the command to stop, wait up to `grace_s`, then end every process left in its group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    for sig, wait_s in ((signal.SIGTERM, KILL_WAIT_S), (signal.SIGKILL, KILL_WAIT_S)):
        if not group_members(proc.pid):
            break
        _signal_group(proc.pid, sig)
        deadline = time.monotonic() + wait_s
        while group_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    if proc.poll() is None:
        proc.wait()


def run_group(cmd: Sequence[str], cwd: Path, grace_s: float = GRACE_S, env: Mapping[str, str] | None = None) -> int:
    """Run `cmd` until it exits or we are told to stop; either way none of its processes outlives this call.
    Returns its exit status, or 0 when a stop signal ended it."""
    def raise_stop(signum: int, frame: object) -> None:
        raise _Stop(signum)

    previous = {s: signal.signal(s, raise_stop) for s in STOP_SIGNALS}
    proc = None
    try:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, start_new_session=True, preexec_fn=_child_setup)
        return proc.wait()
    except _Stop:
        return 0
    finally:
        for s in STOP_SIGNALS:  # a second signal while stopping must not leave the group half stopped
            signal.signal(s, signal.SIG_IGN)
        if proc is not None:
            stop_group(proc, grace_s)
        for s, handler in previous.items():
            signal.signal(s, handler)
