"""An audit hook in the worker that reports reach for what the sandbox hides (threat 22).

The sandbox already makes these reaches fail (empty mounts, no network, another uid); the hook
makes the *attempt* visible, so a candidate that peeks and then computes honestly is floored
too. Reports go out at once on a dedicated channel, line by line, so code that runs later in
the same interpreter cannot take them back; Python cannot remove an audit hook once added.
"""
from __future__ import annotations

import os
import re
import sys

_SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSW|API_?KEY|CREDENTIAL|AWS_|HF_|GITHUB|SSH_)", re.I)
_FORBIDDEN_EVENTS = {
    "socket.connect": "opened a network connection",
    "socket.bind": "bound a network socket",
    "socket.sendto": "sent a network datagram",
    "socket.getaddrinfo": "resolved a network name",
    "os.fork": "forked a process",
    "os.forkpty": "forked a process",
    "os.system": "ran a shell command",
    "os.exec": "replaced the worker's program",
    "os.kill": "signalled another process",
}

# Interpreter hooks that would run the candidate's Python inside the worker's own code, or hand it the
# worker's objects: refused (the call raises) and reported. Frames are not here: the candidate's code runs
# on a thread of its own, with no frame of the worker below it (grader/boundary.py).
_REFUSED_EVENTS = {
    "sys.settrace": "set a trace function",
    "sys.setprofile": "set a profile function",
    "sys.addaudithook": "added an audit hook",
    "sys._current_frames": "read every thread's frames",
    "sys.monitoring.register_callback": "registered a sys.monitoring callback",
    "gc.get_objects": "listed every object the collector tracks",
    "gc.get_referrers": "searched the collector for an object's referrers",
    "gc.get_referents": "walked an object's referents through the collector",
}

AUDIT_EXIT = 87
"""Exit status of a worker whose audit channel was replaced or closed when it had something to report."""

# Entry points that reserve persisting L2 or pin memory in it (threat 14). A candidate has no use for
# them but to keep its inputs cached across the flush; reaching for one is reported even where the
# driver refuses the call (then the carve-out itself never shows).
_L2_ENTRY_POINTS = frozenset({
    "cudaDeviceSetLimit", "cuCtxSetLimit", "cudaStreamSetAttribute", "cuStreamSetAttribute",
    "cudaCtxResetPersistingL2Cache", "cuCtxResetPersistingL2Cache", "cudaGraphKernelNodeSetAttribute",
    "cuGraphKernelNodeSetAttribute", "cudaLaunchKernelExC", "cuLaunchKernelEx",
})


def _writes(mode, flags) -> bool:
    if isinstance(mode, str) and any(c in mode for c in "wax+"):
        return True
    return isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))


def install(fd: int, sealed_paths: list[str], revealed: list[str] = ()) -> None:
    """Add the hook; `fd` is the write end of the audit channel to the sealed parent."""
    sealed = tuple(os.path.realpath(p).rstrip("/") + "/" for p in sealed_paths if p)
    allowed = tuple(os.path.realpath(p).rstrip("/") + "/" for p in revealed if p)
    own_pid = str(os.getpid())
    own_code = os.path.dirname(os.path.realpath(__file__)) + "/"
    sealed_code = own_code + "catalogue/"
    report = reporter(fd)

    def path_violation(path: str) -> str | None:
        p = os.path.realpath(path) if path else ""
        if allowed and (p.startswith(allowed) or p + "/" in allowed):
            return None
        if p.startswith(own_code) and not p.startswith(sealed_code) and p.endswith((".py", ".pyc")):
            return None  # the grader's own source (open source anyway): tracebacks read it
        if p.startswith(sealed) or p.rstrip("/") + "/" in sealed:
            return f"read sealed path {p}"
        if p.startswith("/proc/") and not p.startswith(("/proc/self/", f"/proc/{own_pid}/")):
            part = p.split("/")[2]
            if part.isdigit() or part in ("1",):
                return f"read another process's {p}"
        if p.startswith(("/root/", "/home/")) or p in ("/root", "/home"):
            return f"read a home directory {p}"
        return None

    watched = frozenset({"open", "os.listdir", "os.scandir", "glob.glob", "os.chdir", "object.__setattr__",
                         "ctypes.dlsym", *_FORBIDDEN_EVENTS, *_REFUSED_EVENTS})
    refused = _REFUSED_EVENTS

    def hook(event: str, args: tuple) -> None:
        if event not in watched:  # the hot path: most events (attribute access, imports) pass at once
            return
        if event in refused:
            report("interp", f"{refused[event]} ({event})")
            raise RuntimeError(f"{event} is refused inside the grader's worker")
        if event == "object.__setattr__":
            if len(args) > 1 and args[1] == "__code__":  # a function's code swapped in place
                report("clock", f"replaced the code of {getattr(args[0], '__qualname__', '?')}")
            return
        if event == "ctypes.dlsym":
            name = args[1] if len(args) > 1 else None
            if isinstance(name, str) and name in _L2_ENTRY_POINTS:
                report("l2", f"looked up {name}, which reserves or pins persisting L2")
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if isinstance(path, (str, bytes)):
                p = os.fsdecode(path)
                why = path_violation(p)
                if why:
                    report("sandbox", why)
                elif _writes(mode, flags) and not os.path.realpath(p).startswith(("/tmp/", "/dev/")):
                    report("sandbox", f"wrote outside its scratch directory: {os.path.realpath(p)}")
        elif event in ("os.listdir", "os.scandir", "glob.glob", "os.chdir"):
            path = args[0] if args else None
            if isinstance(path, (str, bytes)):
                why = path_violation(os.fsdecode(path))
                if why:
                    report("sandbox", why.replace("read", "listed"))
        elif event in _FORBIDDEN_EVENTS:
            report("sandbox", f"{_FORBIDDEN_EVENTS[event]} ({event})")

    sys.addaudithook(hook)


_REPORTERS: dict = {}


def reporter(fd: int):
    """The one writer of the audit channel `fd`: a line per report, sent at once.

    The channel's identity is taken now; a report that finds the descriptor closed or pointing
    elsewhere (the candidate silenced it, perhaps only for a moment) ends the worker with
    AUDIT_EXIT instead of being lost, and the parent floors that exit."""
    if fd in _REPORTERS:
        return _REPORTERS[fd]
    write, fstat, exit_ = os.write, os.fstat, os._exit  # captured: later patches reach none of them
    st = fstat(fd)
    ident = (st.st_dev, st.st_ino)

    def report(kind: str, detail: str) -> None:
        try:
            now = fstat(fd)
            if (now.st_dev, now.st_ino) != ident:
                exit_(AUDIT_EXIT)
            write(fd, f"{kind}\t{detail[:300]}\n".encode("utf-8", "replace"))
        except OSError:
            exit_(AUDIT_EXIT)

    _REPORTERS[fd] = report
    return report


def watch_signals(fd: int) -> None:
    """Report every request for a signal handler or a timer: a handler runs the candidate's code in
    between the worker's own (deferred work, threat 8). Off the main thread, where candidate code
    runs, CPython refuses the handler anyway; a handler set below Python shows in the process's
    caught-signal mask, which the parent reads."""
    import signal

    report = reporter(fd)
    for name in ("signal", "setitimer", "alarm", "set_wakeup_fd"):
        orig = getattr(signal, name, None)
        if orig is None:
            continue

        def wrapped(*args, _orig=orig, _name=name, **kwargs):
            report("interp", f"asked for a signal handler or timer (signal.{_name})")
            return _orig(*args, **kwargs)

        setattr(signal, name, wrapped)


def watch_threads(fd: int) -> None:
    """Report every Python-level thread start at once (deferred work hides in threads, threat 8).

    A thread that finishes before the parent counts threads would otherwise leave no trace.
    """
    import _thread
    import threading

    report = reporter(fd)
    for owner, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                        (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        orig = getattr(owner, name, None)
        if orig is None:
            continue

        def start(*args, _orig=orig, **kwargs):
            report("threads", "started a thread")
            return _orig(*args, **kwargs)

        setattr(owner, name, start)


class AuditedEnviron(dict):
    """os.environ stand-in that reports reads of secret-looking variables (they are scrubbed)."""

    def __init__(self, data: dict, fd: int):
        super().__init__(data)
        self._report = reporter(fd)
        self._seen: set = set()  # each key is judged once: Triton reads its knobs on every launch

    def _note(self, key) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        if isinstance(key, str) and _SECRET_ENV.search(key) and not key.startswith(("TRITON_", "TORCH_", "CUDA_")):
            self._report("sandbox", f"read environment secret {key}")

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)
