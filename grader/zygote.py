"""Worker start-up: a pre-imported zygote that forks one fresh worker per attempt.

`python -m grader.zygote FD` imports torch, triton and the worker code once (CUDA is never
initialised here), then forks a child per `spawn` request. The child enters the sandbox,
initialises CUDA itself and serves exactly one attempt. The zygote never loads the task
catalogue, so nothing sealed is in the memory a child inherits.

`child_main` is also what the fresh-process mode runs (`python -m grader.zygote --fresh FD`),
the one-interpreter-per-attempt baseline that KernelBench-style harnesses use.

CUDA cannot survive a fork: once the zygote has initialised or even queried the driver
(`torch.cuda.is_available()` does), every child fails with "Cannot re-initialize CUDA in forked
subprocess". A CPU wheel of torch never reaches the driver, so CPU tests cannot see that by
running; instead the pre-import runs under `CudaQueryGuard`, which makes every such query raise
there, and the zygote checks that a forked child is not in torch's "bad fork" state.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
import types
from typing import NoReturn

from grader import wire


START_ERROR_CHARS = 3000
"""Most characters of a start-up traceback sent to the parent (its tail: the exception is last)."""


def child_main(sock: socket.socket, audit_fd: int, cfg: dict) -> None:
    """In the worker process: sandbox, scrub, then serve the attempt over `sock`.

    A failure before the hello reaches the parent as a hello-error frame carrying the traceback:
    the worker's stderr already goes to its own scratch log, where nobody would read it."""
    try:
        worker, hello = _boot(sock, audit_fd, cfg)
    except BaseException as e:  # noqa: BLE001 - reported, then re-raised so the process exits non-zero
        send_start_failure(sock, e)
        raise
    wire.send(sock, hello)
    worker.serve()


def relay_ns_child(sock: socket.socket | None, namespaces) -> None:
    """An exec'd process cannot be the first process of a PID namespace itself: it forks one that is,
    tells the parent that process's pid (the one to watch and kill) in a first frame on `sock` (if
    given), and waits for it, passing on its exit status. Returns in the forked child only."""
    go_r, go_w = os.pipe()
    pid = namespaces.fork()
    if pid == 0:
        os.close(go_w)
        os.read(go_r, 1)  # the relay frame is on the channel before the worker's hello
        os.close(go_r)
        return
    os.close(go_r)
    if sock is not None:
        wire.send(sock, {"relay_pid": pid})
        sock.close()
    os.close(go_w)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def send_start_failure(sock: socket.socket, e: BaseException) -> None:
    """Tell the parent why this worker could not start: {"ok": False, "hello": True, "error": traceback}."""
    try:
        import traceback

        text = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
    except BaseException:  # noqa: BLE001 - out of memory or worse: the exception alone still helps
        text = f"{type(e).__name__}: {e}"
    try:
        wire.send(sock, {"ok": False, "hello": True, "error": text[-START_ERROR_CHARS:]})
    except (OSError, ValueError):  # the parent is gone (or the socket never opened): nobody to tell
        pass


def _boot(sock: socket.socket, audit_fd: int, cfg: dict):
    """Everything before the hello; returns the worker and its hello frame."""
    from grader import sandbox

    # A module imported lazily in the worker would have its bytecode cached next to its source in
    # site-packages: a write outside the scratch directory that the audit hook rightly reports.
    sys.dont_write_bytecode = True
    t0 = time.perf_counter()
    os.setpgid(0, 0)
    if cfg.get("cpus"):  # the slot's own cores: the candidate and its expert twin wake up alike
        os.sched_setaffinity(0, cfg["cpus"])
    layers = sandbox.enter(hide=cfg["hide"], reveal=cfg.get("reveal", []), tmp_mb=cfg["tmp_mb"],
                           uid=cfg.get("uid"), nproc=cfg["nproc"], nofile=cfg["nofile"],
                           fsize_mb=cfg["fsize_mb"], address_space_mb=cfg.get("address_space_mb"),
                           pid_ns_off=cfg.get("pid_ns_off", ""), own_root_off=cfg.get("own_root_off", ""))
    scratch = layers["scratch"] if layers["scratch"] != "off" else cfg["fallback_scratch"]
    os.makedirs(scratch, exist_ok=True)
    os.chdir(scratch)
    log = os.open(os.path.join(scratch, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)  # the candidate's prints stay in its own scratch, not in the pipeline's logs
    os.dup2(log, 2)
    os.close(log)
    settle_in(cfg["env"], scratch, cfg["hide"], cfg.get("reveal", []))
    t_seed = time.perf_counter()
    seeded = _plant_triton_seed()
    t_seeded = time.perf_counter()
    from grader.worker import Worker

    t_sandbox = time.perf_counter()
    worker = Worker(sock, cfg["device"], audit_fd=audit_fd, sealed=cfg["hide"], reveal=cfg.get("reveal", []),
                    role=cfg.get("role", "candidate"))
    from grader import boundary

    boundary.unlisted()  # the worker holds what it needs; the candidate finds no module of the grader's
    hello = {"ok": True, "hello": True, "pid": os.getpid(), "sandbox": layers, "audit_fd": audit_fd,
             "boot_ms": (time.perf_counter() - t0) * 1e3, "sandbox_ms": (t_sandbox - t0) * 1e3,
             "boot_parts_ms": worker.boot_parts_ms}
    if seeded:
        hello["triton_seed_ms"] = (t_seeded - t_seed) * 1e3
    return worker, hello


_TRITON_SEED: dict[str, bytes] = {}
"""Triton's host module as the service built it (grader.tritonseed), given to this zygote once (`triton_seed`): every
worker forked after that finds it in its own Triton cache."""


def _plant_triton_seed() -> int:
    """Write the zygote's Triton seed into this worker's own cache (`TRITON_CACHE_DIR`, set by `settle_in`), before
    anything of the attempt's runs; the number of files written (0 without a seed, or if it could not be written:
    Triton then builds its module itself)."""
    cache = os.environ.get("TRITON_CACHE_DIR")
    if not _TRITON_SEED or not cache:
        return 0
    from grader import tritonseed

    try:
        return tritonseed.plant(_TRITON_SEED, cache)
    except OSError:
        return 0
    finally:
        _TRITON_SEED.clear()  # this worker's copy of the zygote's memory needs it no more


def settle_in(env: dict, scratch: str, hide: list[str], reveal: list[str]) -> None:
    """After the sandbox is entered: the scrubbed environment pointed at the scratch folder, and no
    import path inside a hidden directory."""
    env = dict(env)
    env.pop("PYTHONPATH", None)  # it found the grader before the sandbox; it would only name the checkout now
    # The worker's uid is in no passwd file: a user name of its own, or getpass.getuser() (which libraries name their
    # cache folders after, torch.compile's among them) raises KeyError and the attempt grades compile_error.
    user = f"kt{os.getuid()}"
    env.update(HOME=scratch, TMPDIR=scratch, TRITON_CACHE_DIR=os.path.join(scratch, ".triton"),
               TORCH_EXTENSIONS_DIR=os.path.join(scratch, ".torch_extensions"), USER=user, LOGNAME=user)
    os.environ.clear()
    os.environ.update(env)
    # tempfile caches its directory on first use, and the pre-import used it in the zygote (/tmp):
    # without this, TemporaryFile opens /tmp itself (O_TMPFILE) and mkstemp writes beside the scratch.
    import tempfile

    tempfile.tempdir = scratch
    # Entries inside hidden directories would make every new import scan a sealed path.
    hidden = tuple(h.rstrip("/") + "/" for h in hide)
    revealed = tuple(r.rstrip("/") + "/" for r in reveal)
    sys.path[:] = [p for p in sys.path if p and os.path.isdir(p) and os.access(p, os.R_OK)
                   and (not (os.path.realpath(p) + "/").startswith(hidden)
                        or (os.path.realpath(p) + "/").startswith(revealed))]
    sys.path_importer_cache.clear()


class CudaTouchedInZygote(RuntimeError):
    """Something the zygote imports initialised or queried CUDA; no forked worker could use it."""


# Calls that initialise the CUDA driver, query it (NVML included) or poison torch's fork state.
# Only Python functions are guarded, by swapping their code. The torch._C builtins behind them are
# not replaced: a stand-in would stay bound wherever an import took it meanwhile (torch._dynamo
# binds several at import), with another identity than the one torch's own tables hold. A direct
# call of one still fails the zygote's start: it leaves torch's bad-fork mark (`check_fork_safe`).
CUDA_QUERIES = {
    "torch.cuda": (
        "is_available", "device_count", "init", "_lazy_init", "current_device", "set_device",
        "get_device_properties", "get_device_name", "get_device_capability", "synchronize", "mem_get_info",
        "current_stream", "default_stream", "can_device_access_peer", "ipc_collect", "cudart",
        "is_bf16_supported", "is_tf32_supported", "get_arch_list", "get_gencode_flags", "_exchange_device",
        "_maybe_exchange_device", "_check_capability", "_check_cubins", "_device_count_nvml",
        "_raw_device_count_nvml", "_raw_device_uuid_nvml", "_get_nvml_device_index", "_device_count_amdsmi",
        "_raw_device_count_amdsmi", "_raw_device_uuid_amdsmi", "list_gpu_processes", "utilization",
        "temperature", "power_draw", "clock_rate", "memory_usage", "device_memory_used"),
    "torch.accelerator": (
        "device_count", "is_available", "current_device_index", "set_device_index", "synchronize",
        "current_stream", "set_stream", "get_device_capability"),
    "triton.runtime.driver": ("_create_driver",),  # Triton's own driver, made on first use
}


class CudaQueryGuard:
    """While active, every call in CUDA_QUERIES raises CudaTouchedInZygote; on exit all is restored.

    The functions keep their identity: their code is swapped, not their names. Modules imported
    meanwhile bind these functions (`staticmethod(torch.cuda.current_device)` in torch._dynamo,
    `from torch.cuda import ...`), and a replaced name would leave them holding the refusal forever.
    A refused call that the caller swallowed still fails the pre-import when the guard ends."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        self._saved: list[tuple[types.FunctionType, types.CodeType, dict | None]] = []

    def __enter__(self) -> "CudaQueryGuard":
        for module in CUDA_QUERIES:
            self.cover(module)
        return self

    def cover(self, module: str) -> None:
        """Guard the listed functions of `module` if it is imported (Triton is, only after torch)."""
        mod = sys.modules.get(module)
        for name in CUDA_QUERIES.get(module, ()) if mod is not None else ():
            fn = getattr(mod, name, None)
            while not isinstance(fn, types.FunctionType) and hasattr(fn, "__wrapped__"):
                fn = fn.__wrapped__  # lru_cache and the like call the function they wrap
            if not isinstance(fn, types.FunctionType) or any(fn is f for f, _, _ in self._saved):
                continue
            self._saved.append((fn, fn.__code__, fn.__kwdefaults__))
            fn.__code__ = _refusing_code(f"{module}.{name}", len(fn.__code__.co_freevars))
            fn.__kwdefaults__ = {**(fn.__kwdefaults__ or {}), "_kt_refuse": self._refuse}

    def _refuse(self, qualname: str):
        caller = sys._getframe(2)  # 0: here, 1: the refusing stub, 2: whoever called the CUDA query
        self.refused.append(f"{qualname}() from {caller.f_code.co_filename}:{caller.f_lineno}")
        raise CudaTouchedInZygote(
            f"{qualname}() was called while the zygote pre-imports modules: it initialises or queries "
            "the CUDA driver, and every worker forked afterwards would fail ('Cannot re-initialize CUDA "
            "in forked subprocess'). Import the module that calls it in the worker, after the fork.")

    def restore(self) -> None:
        for fn, code, kwdefaults in reversed(self._saved):
            fn.__code__ = code
            fn.__kwdefaults__ = kwdefaults
        self._saved.clear()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.restore()
        if exc_type is None and self.refused:  # someone caught the refusal: still a CUDA query here
            raise CudaTouchedInZygote("the zygote's pre-import queried CUDA (the error was caught by the "
                                      "caller): " + "; ".join(self.refused[:5]))
        torch = sys.modules.get("torch")
        if exc_type is None and torch is not None and torch.cuda.is_initialized():
            raise CudaTouchedInZygote("CUDA was initialised during the zygote's pre-import")


def _refusing_code(qualname: str, n_free: int) -> types.CodeType:
    """Code for a function that reports `qualname` to its `_kt_refuse` keyword default, with
    `n_free` free variables (a function's code can only be swapped for one with as many)."""
    free = [f"_kt_free{i}" for i in range(n_free)]
    src = ("def _outer():\n" + "".join(f"    {v} = None\n" for v in free)
           + "    def refused(*args, _kt_refuse=None, **kwargs):\n"
           + (f"        ({', '.join(free)},)\n" if free else "")
           + f"        return _kt_refuse({qualname!r})\n    return refused\n")
    ns: dict = {}
    exec(compile(src, "<kerneltraj CUDA guard>", "exec"), ns)  # noqa: S102 - fixed text, no input
    return ns["_outer"]().__code__


def check_fork_safe() -> None:
    """Fork once and ask the child whether torch considers it a bad fork: the exact failure every
    worker would meet if anything (a direct torch._C call included) touched CUDA in the zygote."""
    import torch

    pid = os.fork()
    if pid == 0:
        try:
            code = 1 if torch.cuda._is_in_bad_fork() else 0
        except BaseException:  # noqa: BLE001 - the child must never return into the zygote
            code = 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise CudaTouchedInZygote("a child forked from the zygote cannot use CUDA (torch reports a bad "
                                  "fork): something in the pre-import initialised CUDA")


# What the zygote imports once for every worker, in order, under CudaQueryGuard. Everything the
# worker needs after the sandbox hides the checkout (grader.*) must be here. Not here:
# torch.utils.cpp_extension, which calls torch.cuda.is_available() at import on a CUDA build
# (finding CUDA_HOME); the worker imports it after the fork (grader.compile_cache.ExtensionHook),
# from site-packages, which the sandbox keeps visible.
PREIMPORTS = (
    "triton", "triton.language", "torch.profiler",
    "grader.boundary", "grader.compile_cache", "grader.guard", "grader.inputs", "grader.sandbox", "grader.timing",
    "grader.tritonseed", "grader.worker",
    # The first profiler session imports these (seconds); import them once here, before any fork.
    # Running the profiler itself here would start native threads that a fork cannot carry.
    "torch._dynamo", "torch._inductor",
)
OPTIONAL_PREIMPORTS = ("setuptools", "setuptools.command.build_ext")
"""cpp_extension's own slow imports (no CUDA in them), so the worker's import of it stays short."""


def _preimport(device: str) -> None:
    import importlib

    import torch  # noqa: F401 - the guard needs torch.cuda; torch's own import does not query CUDA

    with CudaQueryGuard() as guard:
        for name in PREIMPORTS:
            importlib.import_module(name)
            if name == "triton":  # Triton's driver factory exists only once triton is imported
                guard.cover("triton.runtime.driver")
        for name in OPTIONAL_PREIMPORTS:
            try:
                importlib.import_module(name)
            except ImportError:  # the worker's own import of cpp_extension will say what is missing
                pass

    # Source lines of the grader, cached now: tracebacks formed later must not read the checkout.
    import linecache

    import grader.worker

    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None) or ""
        if f.endswith(".py") and f.startswith(os.path.dirname(os.path.dirname(grader.worker.__file__))):
            linecache.getlines(f)


def _triton_key_once() -> float | None:
    """Triton's key of itself (`triton.runtime.cache.triton_key`: the digests of its compiler's and language's sources
    and of its whole `libtriton` library, 415 MB in Triton 3.6), computed here once, so that every worker forked from
    now on finds it in Triton's own cache of it instead of reading and digesting the library at its first kernel
    (0.52 s on the CI sandbox's cores, Triton 3.9). It depends on Triton's installed files alone. Its milliseconds,
    or None where this Triton has no such key (each worker then does what Triton does)."""
    t = time.perf_counter()
    try:
        from triton.runtime.cache import triton_key

        triton_key()
    except (ImportError, AttributeError, OSError):
        return None
    return (time.perf_counter() - t) * 1e3


def zygote_main(ctl_fd: int) -> None:
    # No parent-death signal here: Linux ties it to the thread that started the zygote, and a zygote
    # restarted from a grading thread would die with that thread. The zygote ends when its control
    # channel closes instead, which the kernel does when the parent dies however it dies.
    ctl = socket.socket(fileno=ctl_fd)
    cfg0 = ctl_recv(ctl)
    try:
        _preimport(cfg0["device"])
        key_ms = _triton_key_once() if cfg0.get("triton_key_once") else None
        check_fork_safe()
        from grader.sandbox import PidNamespaces

        namespaces = PidNamespaces()
    except BaseException as e:  # noqa: BLE001 - the Slot raises "zygote failed to start" with this reply
        import traceback

        text = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
        ctl_send(ctl, {"ok": False, "ready": False, "error": text[-START_ERROR_CHARS:]})
        raise
    ctl_send(ctl, {"ok": True, "ready": True, **({"triton_key_ms": key_ms} if key_ms is not None else {})})
    own_root_off: dict[tuple, str] = {}  # probed once per sandbox shape (a slot's roles differ in nothing it uses)
    while True:
        try:
            msg = ctl_recv(ctl)
        except (wire.WireError, OSError):
            return
        if msg["op"] == "spawn":
            fd, audit_fd = msg["_fds"][:2]
            msg["config"]["pid_ns_off"] = namespaces.off
            msg["config"]["own_root_off"] = _own_root_off(msg["config"], own_root_off)
            pid = namespaces.fork()
            if pid == 0:
                try:
                    ctl.close()
                    child_main(socket.socket(fileno=fd), audit_fd, msg["config"])
                    code = 0
                except BaseException:  # noqa: BLE001 - the child must never return into the zygote loop
                    import traceback

                    traceback.print_exc()
                    code = 70
                os._exit(code)
            os.close(fd)
            os.close(audit_fd)
            if not _answered(ctl, {"ok": True, "pid": pid}):
                return
        elif msg["op"] == "triton_seed":  # grader.tritonseed: kept for every worker forked from now on
            from grader import tritonseed

            _TRITON_SEED.clear()
            try:
                with os.fdopen(msg["_fds"][0], "rb") as f:
                    _TRITON_SEED.update(tritonseed.decode(f.read()))
                answer = {"ok": True, "files": len(_TRITON_SEED)}
            except (OSError, ValueError, IndexError) as e:  # no seed: each worker builds Triton's module itself
                _TRITON_SEED.clear()
                answer = {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
            if not _answered(ctl, answer):
                return
        elif msg["op"] == "reap":
            _, status = os.waitpid(int(msg["pid"]), 0)
            if not _answered(ctl, {"ok": True, "status": status}):
                return
        elif msg["op"] == "bye":
            return


def _answered(ctl: socket.socket, msg: dict) -> bool:
    """Send the parent an answer; False when it has gone (its end closed as the service shut down, H100 run 67 printed
    the zygote's BrokenPipeError then): the zygote ends quietly, as when its channel closes."""
    try:
        ctl_send(ctl, msg)
    except OSError:
        return False
    return True


def _own_root_off(cfg: dict, seen: dict[tuple, str]) -> str:
    """Whether workers of this shape can have a root of their own (sandbox.probe_own_root), probed once."""
    from grader.sandbox import probe_own_root

    if cfg.get("own_root_off"):  # switched off by the service
        return cfg["own_root_off"]
    key = (tuple(cfg["hide"]), tuple(cfg.get("reveal", [])), cfg["tmp_mb"])
    if key not in seen:
        seen[key] = probe_own_root(cfg["hide"], cfg.get("reveal", []), cfg["tmp_mb"])
    return seen[key]


def ctl_recv(ctl: socket.socket) -> dict:
    """One control message (a SOCK_SEQPACKET record: JSON plus any passed file descriptors)."""
    data, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 4)
    if not data:
        raise wire.WireError("zygote control channel closed")
    msg = json.loads(data)
    msg["_fds"] = fds
    return msg


def leave(code: int) -> NoReturn:
    """End this process now, without the interpreter's teardown of torch and triton (1.4 s of wall and 1.75 s of
    CPU on 2 cores: bench/process_ends.py). For the grader's own processes (a zygote, a fresh worker, a confined
    probe, a replay grader), which hold no file or lock that an exit must flush beyond stdout and stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ctl_send(ctl: socket.socket, msg: dict, fds: list[int] = ()) -> None:
    socket.send_fds(ctl, [json.dumps(msg).encode()], list(fds))


if __name__ == "__main__":
    if sys.argv[1] == "--fresh":
        fresh_sock = socket.socket(fileno=int(sys.argv[2]))
        try:
            fresh_cfg = json.loads(os.environ.pop("KERNELTRAJ_WORKER_CONFIG"))
            if fresh_cfg["device"] == "cpu":
                os.environ["TRITON_INTERPRET"] = "1"
            _preimport(fresh_cfg["device"])
            from grader.sandbox import PidNamespaces

            fresh_ns = PidNamespaces()
        except BaseException as e:  # noqa: BLE001 - the parent hears why, then the process exits non-zero
            send_start_failure(fresh_sock, e)
            raise
        fresh_cfg["pid_ns_off"] = fresh_ns.off
        fresh_cfg["own_root_off"] = _own_root_off(fresh_cfg, {})
        relay_ns_child(fresh_sock, fresh_ns)
        child_main(fresh_sock, int(sys.argv[3]), fresh_cfg)
    else:
        zygote_main(int(sys.argv[1]))
    leave(0)
