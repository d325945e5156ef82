"""A `ninja` that ends an extension's build at its first failed command, instead of after the others.

Why: torch builds an extension with ninja, which compiles the C++ object (`main.cpp`, 20-25 s of parsing torch's
headers) and the CUDA one (`cuda.cu`, 60-80 s: nvcc's host and device front ends and the host compile, one after
the other) side by side. When one fails, ninja starts nothing more but waits for the others to finish before it
reports. Most failed CUDA-L1 builds fail in `main.cpp` (a second `PYBIND11_MODULE` beside load_inline's own, a
declaration that does not parse), so the build's verdict waits a minute for a `cuda.cu` that cannot be linked into
anything, while its attempt waits in the queue (H100 run 119's round 1: 10 builds ahead, 8 failed, 407 s of
builders' time for a round of 112 s, whose last grade was a failed build's).

What changes, and what does not: the first failed command's output is exactly what ninja printed for it (the
compiler's verdicts, `compile_cache.conclusive_failure`), followed by the line ninja ends a failed build with; the
other commands are stopped (ninja forwards the signal to each one's process group) and their output dropped. A
build that fails fails all the same, with the verdict of its first failure; a build that succeeds is untouched.
It runs in the process that builds (a builder ahead: `grader.buildahead`), which is the attempt's own: an attempt
that changes its PATH or the wrapper changes only how fast its own build fails.

Standard library only: the builder runs it before torch builds anything.
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

QUIET_S = 0.3
"""After ninja prints `FAILED:`, how long its output must stay quiet before the build is stopped: ninja prints a
failed command's whole output at once, as it ends."""

STOP_WAIT_S = 10.0
"""How long ninja may take to stop its other commands once told to (SIGTERM), before it is killed."""

FAILED_END = "ninja: build stopped: subcommand failed.\n"
"""What ninja prints last when a command failed (and it was not interrupted)."""

_WRAPPER = r'''
import os, select, signal, subprocess, sys, time
REAL, QUIET_S, STOP_WAIT_S, FAILED_END = {real!r}, {quiet!r}, {stop_wait!r}, {failed_end!r}
args = sys.argv[1:]
if "--version" in args or "-t" in args:
    os.execv(REAL, [REAL] + args)
proc = subprocess.Popen([REAL] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
fd, out, seen, failed, last = proc.stdout.fileno(), sys.stdout.buffer, b"", False, time.monotonic()
while True:
    ready, _, _ = select.select([fd], [], [], 0.05)
    now = time.monotonic()
    if ready:
        data = os.read(fd, 65536)
        if not data:
            break
        out.write(data)
        out.flush()
        last = now
        if not failed:
            seen = (seen + data)[-65536:]
            failed = seen.startswith(b"FAILED: ") or b"\nFAILED: " in seen
    elif failed and now - last >= QUIET_S:
        proc.send_signal(signal.SIGTERM)  # ninja stops every other command's process group, then exits
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.write(FAILED_END.encode())
        out.flush()
        sys.exit(1)
sys.exit(proc.wait())
'''


def install(scratch: str | os.PathLike) -> str | None:
    """Put a first-failure `ninja` ahead of the real one on this process's PATH (torch's builds look it up there),
    its files under `scratch`; the folder it is in, or None where no ninja is on the PATH (torch cannot build)."""
    real = shutil.which("ninja")
    if real is None:
        return None
    folder = Path(scratch) / ".kt_ninja"
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "first_failure.py"
    script.write_text(_WRAPPER.format(real=os.path.realpath(real), quiet=QUIET_S, stop_wait=STOP_WAIT_S,
                                      failed_end=FAILED_END))
    ninja = folder / "ninja"
    ninja.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(script))} \"$@\"\n")
    ninja.chmod(0o755)
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return str(folder)
