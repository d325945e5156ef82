"""Run a Python program on corpus code inside the worker sandbox, outside any grade.

An importer must learn things about a task that only running its reference tells (the output's
shape and dtype, its FLOPs). That code is as untrusted as a candidate: it runs here, in a process
that enters the same sandbox as a worker (mount, network, IPC and PID namespaces, a root of its own
with a private /proc and /tmp, the checkout and every non-system directory hidden, an unprivileged uid
of its own, resource limits, a scrubbed environment), with no GPU: CUDA_VISIBLE_DEVICES is empty and the host's
GPU device nodes are covered, so code that sets the variable again still reaches no device. The caller hands over
the program's text and its stdin and gets back its stdout: the importer never executes corpus code itself.

    python -m grader.confine        (the child; its config comes in KERNELTRAJ_CONFINE)
"""
from __future__ import annotations

import glob
import json
import os
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass

_CONFIG_VAR = "KERNELTRAJ_CONFINE"

GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")
"""Where a host's GPU device nodes are: NVIDIA's (the control device, each GPU, UVM, capabilities) and DRM's."""


def gpu_nodes(patterns: tuple[str, ...] = GPU_NODES) -> list[str]:
    """The character devices matching `patterns`: what a confined child's sandbox covers (`sandbox.enter(cover)`)."""
    found = []
    for path in sorted({p for pattern in patterns for p in glob.glob(pattern)}):
        try:
            if stat.S_ISCHR(os.stat(path).st_mode):
                found.append(path)
        except OSError:
            pass
    return found


@dataclass(frozen=True)
class Confined:
    """How a confined program ended."""

    returncode: int
    stdout: bytes
    stderr: bytes
    sandbox: dict
    """The sandbox layers it ran under (what `sandbox.enter` recorded), {} when it never got there."""
    timed_out: bool = False
    overflowed: bool = False
    """It wrote more than `output_cap` bytes to stdout or stderr: it was killed there, and the rest is lost."""


def run_confined(program: str, stdin: bytes, timeout_s: float, *, memory_mb: int = 8192, fsize_mb: int = 16,
                 nproc: int = 64, tmp_mb: int = 512, hide_extra: list[str] = (), preload: list[str] = (),
                 output_cap: int = 64 << 20, env_extra: dict[str, str] | None = None,
                 cover: list[str] | None = None, nice: int = 0) -> Confined:
    """Run `program` (Python source) in a sandboxed CPU-only child fed `stdin`; never raises for what
    the program does. Every process it leaves is killed before this returns. `preload`: modules of the grader's
    the program may import (imported before the sandbox hides the checkout). `output_cap`: the most bytes kept of
    its stdout and of its stderr; a program that writes more is killed (corpus code must not fill our memory).
    `env_extra`: variables set for it besides the scrubbed environment's. `cover`: device nodes covered by
    /dev/null in its sandbox (default: the host's GPU's, `gpu_nodes`). `nice`: added to its niceness before anything
    of it runs, so every process it starts (a compiler) yields the host's cores to the grading's workers."""
    from grader import launcher, sandbox

    uid, lock = launcher.claim_uid() if os.geteuid() == 0 else (None, None)
    env = dict(launcher.base_env("cpu"), **(env_extra or {}), CUDA_VISIBLE_DEVICES="")
    config = {"program": program, "hide": launcher.sealed_paths(list(hide_extra)), "reveal": launcher.revealed_paths(),
              "uid": uid, "memory_mb": memory_mb, "fsize_mb": fsize_mb, "nproc": nproc, "tmp_mb": tmp_mb,
              "preload": [m for m in preload if m.startswith("grader.")],
              "cover": gpu_nodes() if cover is None else list(cover), "nice": int(nice)}
    env[_CONFIG_VAR] = json.dumps(config)
    proc = subprocess.Popen([sys.executable, "-m", "grader.confine"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd="/", start_new_session=True)
    streams = {"out": bytearray(), "err": bytearray()}
    overflowed = threading.Event()

    def drain(name: str, pipe) -> None:
        keep = streams[name]
        while chunk := pipe.read1(1 << 20):
            if len(keep) + len(chunk) > output_cap:
                overflowed.set()
                _kill_group(proc.pid)
                return
            keep += chunk

    def feed() -> None:
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except (BrokenPipeError, OSError):  # it ended, or closed its stdin, before reading it all
            pass

    readers = [threading.Thread(target=drain, args=(name, pipe), daemon=True)
               for name, pipe in (("out", proc.stdout), ("err", proc.stderr))]
    for t in [*readers, threading.Thread(target=feed, daemon=True)]:  # a child that reads nothing blocks no one
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc.pid)
        proc.wait()
    finally:
        _kill_group(proc.pid)
        if uid is not None:
            sandbox.kill_uid(uid)
        if lock is not None:
            os.close(lock)
    for t in readers:
        t.join(timeout=30)
    out, err = bytes(streams["out"]), bytes(streams["err"])
    layers, _, err = err.partition(b"\n") if err.startswith(b"{") else (b"{}", b"", err)
    try:
        layers = json.loads(layers)
    except ValueError:
        layers = {}
    return Confined(proc.returncode, out, err, layers, timed_out, overflowed.is_set())


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def _child() -> None:
    """Fork into a PID namespace of its own where the host allows it, then enter the sandbox as its
    first process and run the program; this first process waits and passes on its exit status."""
    from grader import sandbox
    from grader.zygote import leave, relay_ns_child, settle_in  # imported now: the checkout is hidden in the sandbox

    config = json.loads(os.environ.pop(_CONFIG_VAR))
    if config.get("nice"):
        os.nice(config["nice"])
    import importlib

    for name in config.get("preload", []):
        importlib.import_module(name)
    namespaces = sandbox.PidNamespaces()
    relay_ns_child(None, namespaces)
    tmp_mb = config.get("tmp_mb", 512)
    layers = sandbox.enter(hide=config["hide"], reveal=config["reveal"], tmp_mb=tmp_mb, uid=config["uid"],
                           nproc=config["nproc"], nofile=256, fsize_mb=config["fsize_mb"],
                           address_space_mb=config["memory_mb"], pid_ns_off=namespaces.off,
                           own_root_off=sandbox.probe_own_root(config["hide"], config["reveal"], tmp_mb),
                           cover=config.get("cover", []))
    sys.stderr.write(json.dumps(layers) + "\n")  # the first line of stderr: what it runs under
    sys.stderr.flush()
    scratch = layers["scratch"] if layers["scratch"] != "off" else None
    if scratch is None:  # no mount namespace (not root): a private folder at least
        import tempfile

        scratch = tempfile.mkdtemp(prefix="kerneltraj-confined-")
    os.chdir(scratch)
    settle_in(dict(os.environ), scratch, config["hide"], config["reveal"])
    program = config.pop("program")
    del config
    exec(compile(program, "<confined program>", "exec"), {"__name__": "__main__"})  # noqa: S102 - sandboxed
    leave(0)  # a program that ends normally skips the teardown of its torch; one that raises or exits as before


if __name__ == "__main__":
    _child()
