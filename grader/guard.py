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
    write = os.write  # captured: patching os.write later does not silence the channel

    def report(kind: str, detail: str) -> None:
        try:
            write(fd, f"{kind}\t{detail[:300]}\n".encode("utf-8", "replace"))
        except OSError:
            pass

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
                         "ctypes.dlsym", *_FORBIDDEN_EVENTS})

    def hook(event: str, args: tuple) -> None:
        if event not in watched:  # the hot path: most events (attribute access, imports) pass at once
            return
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


def watch_threads(fd: int) -> None:
    """Report every Python-level thread start at once (deferred work hides in threads, threat 8).

    A thread that finishes before the parent counts threads would otherwise leave no trace.
    """
    import _thread
    import threading

    write = os.write
    for owner, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                        (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        orig = getattr(owner, name, None)
        if orig is None:
            continue

        def start(*args, _orig=orig, **kwargs):
            try:
                write(fd, b"threads\tstarted a thread\n")
            except OSError:
                pass
            return _orig(*args, **kwargs)

        setattr(owner, name, start)


class AuditedEnviron(dict):
    """os.environ stand-in that reports reads of secret-looking variables (they are scrubbed)."""

    def __init__(self, data: dict, fd: int):
        super().__init__(data)
        self._fd = fd
        self._write = os.write
        self._seen: set = set()  # each key is judged once: Triton reads its knobs on every launch

    def _note(self, key) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        if isinstance(key, str) and _SECRET_ENV.search(key) and not key.startswith(("TRITON_", "TORCH_", "CUDA_")):
            try:
                self._write(self._fd, f"sandbox\tread environment secret {key}\n".encode())
            except OSError:
                pass

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)
