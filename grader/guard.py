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


# Native switches of the observation (torch's op recording and profiler, CUPTI, CPython's eval hooks and
# audit hooks), by the symbol names a ctypes lookup would use: refused and reported. The C++ ones are also
# resolved at install, so a call through an address found without a lookup is refused too.
_NATIVE_SWITCH = re.compile(r"^_Z|"  # any C++ symbol: torch's own kernels below the dispatcher, its switches
                            r"^(?:mem(?:move|cpy|set|ccpy|pcpy)|bcopy|stpn?cpy|strn?cpy|wmem\w+|mprotect|"
                            r"process_vm_\w+|ptrace|pwrite\w*|dlsym|dlopen|dlvsym|syscall)$|"  # raw memory, native reach
                            r"RecordFunction|Callback|[Pp]rofiler|kineto|cupti|PyEval_Set|AuditHook|Dispatch|"
                            r"^(?:cublas|cudnn|cusparse|cufft|cusolver|curand|nccl|cutlass)|"  # library compute
                            r"^_?Py(?:ThreadState|InterpreterState|Frame|Eval|Sys_|Code|Interpreter|Gen|Cell|"
                            r"Function_Set|Object_SetAttr|Dict_SetItem|Module_)")

_NATIVE_SWITCH_SYMBOLS = (
    "_ZN2at20enableRecordFunctionEb", "_ZN2at14clearCallbacksEv", "_ZN2at20clearGlobalCallbacksEv",
    "_ZN2at25clearThreadLocalCallbacksEv", "_ZN2at14removeCallbackEm", "_ZN2at15disableCallbackEm",
    "_ZN2at16reenableCallbackEm", "_ZN2at22addThreadLocalCallbackENS_22RecordFunctionCallbackE",
    "_ZN2at24set_record_function_tls_ERKNS_17RecordFunctionTLSE",
    "_ZN5torch8autograd8profiler15disableProfilerEv", "_ZN5torch8autograd8profiler28disableProfilerInChildThreadEv",
    "PyEval_SetProfile", "PyEval_SetTrace", "PyEval_SetProfileAllThreads", "PyEval_SetTraceAllThreads",
    "cuptiActivityDisable", "cuptiActivityFlushAll", "cuptiUnsubscribe", "cuptiFinalize")


_NATIVE_LIBS = ("libtorch", "libc10", "libcupti", "libpython", "libcuda.", "libkineto")
_LIBRARY_OPENS = re.compile(r"libtorch|libc10|libcublas|libcudnn|libcupti|libcusparse|libcufft|libcusolver|libnccl|"
                            r"libkineto|libpython|_C\.cpython|libmkl|libdnnl|libopenblas")
"""Libraries a candidate's ctypes may not open: their functions compute below the dispatcher (torch's own
kernels, BLAS, DNN) or switch the observation. The CUDA driver (Triton's own runtime opens it) is not here."""
"""The libraries whose code and data hold the observation (torch's op recording, its profiler, CUPTI) and
the interpreter: a candidate reading their bytes (to find a function without a symbol lookup) or writing
into them is refused."""


def _native_libs() -> tuple[set[str], list[tuple[int, int]]]:
    """Paths and address ranges of the `_NATIVE_LIBS` this process has mapped."""
    paths, ranges = set(), []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1] if "/" in line else ""
                if any(k in path for k in _NATIVE_LIBS):
                    paths.add(path)
                    lo, hi = line.split(None, 1)[0].split("-")
                    ranges.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return paths, ranges


def _native_switch_addresses(paths: set[str]) -> frozenset[int]:
    """Addresses of `_NATIVE_SWITCH_SYMBOLS` in the libraries at `paths` (and the process's own symbols)."""
    import ctypes

    found = set()
    for lib in [None, *sorted(paths)]:
        try:
            handle = ctypes.CDLL(lib)
        except OSError:
            continue
        for name in _NATIVE_SWITCH_SYMBOLS:
            try:
                found.add(ctypes.cast(getattr(handle, name), ctypes.c_void_p).value)
            except (AttributeError, ValueError):
                pass
    return frozenset(a for a in found if a)


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
                         "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.dlopen", "ctypes.call_function", "ctypes.cdata",
                         "ctypes.string_at", "ctypes.wstring_at", *_FORBIDDEN_EVENTS, *_REFUSED_EVENTS})
    refused = _REFUSED_EVENTS
    lib_paths, lib_ranges = _native_libs()
    lib_files = frozenset(os.path.realpath(p) for p in lib_paths)
    switches = _native_switch_addresses(lib_paths)

    def in_native_lib(addr) -> bool:
        return isinstance(addr, int) and any(lo <= addr < hi for lo, hi in lib_ranges)

    import _thread

    main, ident = _thread.get_ident(), _thread.get_ident  # the worker's main thread installs the hook

    def hook(event: str, args: tuple) -> None:
        if event not in watched:  # the hot path: most events (attribute access, imports) pass at once
            return
        if event in refused:
            report("interp", f"{refused[event]} ({event})")
            raise RuntimeError(f"{event} is refused inside the grader's worker")
        if event == "object.__setattr__":
            name = args[1] if len(args) > 1 else None
            if name in ("__code__", "__defaults__", "__kwdefaults__"):  # a function's code or bound values swapped
                code = getattr(args[0], "__code__", None)
                ours = os.path.realpath(str(getattr(code, "co_filename", ""))).startswith(own_code)
                if name == "__code__" or ours:  # defaults are set by honest code too (a NamedTuple's)
                    report("clock", f"replaced the {name} of {getattr(args[0], '__qualname__', '?')}")
                if ours and ident() != main:
                    raise RuntimeError("the grader's functions are refused to change inside its worker")
            return
        if event in ("ctypes.cdata", "ctypes.string_at", "ctypes.wstring_at"):
            if ident() != main or (args and in_native_lib(args[0])):  # a raw address: any object of the worker's
                report("interp", "read or wrote memory at a raw address through ctypes (the worker's objects and code "
                                 "are there)")
                raise RuntimeError("raw addresses are refused inside the grader's worker")
            return
        if event == "ctypes.call_function":
            if args and args[0] in switches:
                report("interp", "called a native switch of the observation through ctypes")
                raise RuntimeError("calling that function is refused inside the grader's worker")
            return
        if event == "ctypes.dlopen":
            name = args[0] if args else None
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            if isinstance(name, str) and _LIBRARY_OPENS.search(name) and ident() != main:
                report("interp", f"opened {name[-80:]} through ctypes: its functions compute below the observation")
                raise RuntimeError("that library is refused to ctypes inside the grader's worker")
            return
        if event in ("ctypes.dlsym", "ctypes.dlsym/handle"):
            name = args[1] if len(args) > 1 else None
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            if isinstance(name, str) and name in _L2_ENTRY_POINTS:
                report("l2", f"looked up {name}, which reserves or pins persisting L2")
            elif isinstance(name, str) and _NATIVE_SWITCH.search(name):
                report("interp", f"looked up {name[:80]}, a native switch of the observation or the interpreter")
                raise RuntimeError("that symbol is refused inside the grader's worker")
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if isinstance(path, (str, bytes)):
                p = os.fsdecode(path)
                why = path_violation(p)
                real = os.path.realpath(p)
                if real in lib_files or real.endswith("/mem") and real.startswith("/proc/"):
                    report("interp", f"read the bytes of {real}, the code that observes its calls")
                    raise RuntimeError("reading that file is refused inside the grader's worker")
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


# What starts, stops or steers torch's profiler and the op recording it rests on (grader/observe.py). The
# worker holds its own references to the few it uses, bound before any candidate code existed.
_OBSERVATION = {
    "torch._C._autograd": ("_enable_record_function", "_clear_callbacks", "_prepare_profiler", "_enable_profiler",
                           "_disable_profiler", "_enable_profiler_legacy", "_disable_profiler_legacy",
                           "_set_empty_test_observer", "_toggle_collection_dynamic", "_kineto_step",
                           "_record_function_with_args_enter", "_record_function_with_args_exit"),
    "torch._C._profiler": ("_add_execution_trace_observer", "_enable_execution_trace_observer",
                           "_disable_execution_trace_observer", "_remove_execution_trace_observer",
                           "_set_cuda_sync_enabled_val", "_set_fwd_bwd_enabled_val",
                           "_set_record_concrete_inputs_enabled_val"),
}
_OBSERVATION_PREFIXES = {"torch._C._profiler": ("_cupti_monitor",)}


def seal_raw_memory(fd: int) -> None:
    """ctypes' own raw-memory functions (memmove, memset, string_at, wstring_at, cast) replaced by refusals, and
    the addresses they are built from deleted: a foreign call raises no audit event before Python 3.12, and
    these read or write any byte of the worker. Nothing of the worker's calls them once a candidate exists."""
    import _ctypes
    import ctypes

    for name in ("memmove", "memset", "string_at", "wstring_at", "cast"):
        if hasattr(ctypes, name):
            setattr(ctypes, name, _refusal(reporter(fd), f"ctypes.{name}", "reached raw memory"))
    for owner in (ctypes, _ctypes):
        for name in [n for n in vars(owner) if n.startswith("_") and n.endswith("_addr")]:
            delattr(owner, name)


def seal_observation(fd: int, torch) -> None:
    """Replace every name of a profiler or op-recording switch, wherever a loaded module holds it, by a
    refusal that reports: a candidate that stops, steers or restarts the recording (or turns it off on its
    own thread) would make its calls look unobserved. No reference to the originals is left where Python
    can reach it: the refusal holds none."""
    report = reporter(fd)
    targets: dict[int, str] = {}
    for owner_name, names in _OBSERVATION.items():
        owner = _owner(torch, owner_name)
        wanted = set(names) | {n for n in dir(owner) for p in _OBSERVATION_PREFIXES.get(owner_name, ())
                               if n.startswith(p)}
        for name in wanted:
            value = getattr(owner, name, None)
            if value is not None:
                targets[id(value)] = f"{owner_name}.{name}"
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            continue
        for key, value in list(d.items()):
            label = targets.get(id(value))
            if label is not None:
                d[key] = _refusal(report, label)
    for owner_name in _OBSERVATION:  # C submodules are not always in sys.modules under their names
        owner = _owner(torch, owner_name)
        for key, value in list(vars(owner).items()):
            label = targets.get(id(value))
            if label is not None:
                setattr(owner, key, _refusal(report, label))


def _owner(torch, dotted: str):
    obj = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _refusal(report, label: str, why: str = "switched the observation of its calls"):
    def refused(*args, **kwargs):
        report("interp", f"{why} ({label})")
        raise RuntimeError(f"{label} is refused inside the grader's worker")

    refused.__name__ = label.rsplit(".", 1)[-1]
    return refused


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
