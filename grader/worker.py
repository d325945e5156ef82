"""The candidate's side of a grade: runs untrusted code, never decides anything.

The worker loads the candidate, then answers `call` requests: draw fresh inputs from a seed,
poison the allocator, flush L2, run the candidate once, time it device-wide, and keep a copy of
the output. Every call looks the same to the candidate (no correctness phase vs timing phase):
the sealed parent picks which outputs to fetch and verify only after the calls return.

The candidate shares this process but not this thread: its import and each call run on a thread
of their own (grader/boundary.py), and this thread never runs the candidate's Python. Nothing on
the timing and reporting path is looked up by name once it has loaded: the protocol loop holds its
functions as locals, the clock and the output copy use C entry points bound before the candidate
existed, and after every request an integrity check compares every module, class and instance on
that path (and every function's code) with a snapshot, and a state check looks at what is
process-wide (builtins, torch's tensor types, hooks, signal handlers). Function code swaps are
also reported at once by the audit hook. The parent cross-checks the reported times with its own
clock. The worker is discarded after one attempt.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import operator
import os
import socket
import sys
import time
import traceback
import types

from grader import boundary, expertseed, guard, observe, wire
from grader.compile_cache import ExtensionHook

_perf_ns = time.perf_counter_ns  # captured before any candidate code exists
_UNWATCHED = contextlib.nullcontext()
LAUNCHES: dict[str, int] = {}
LAUNCH_STORAGES: set[int] = set()  # storage addresses of tensors passed to @triton.jit kernels in this call
FOREIGN_STREAM_LAUNCHES: dict[str, int] = {}  # launches on a stream other than the caller's (threat 7)
_STREAM = {"caller": None, "raw": None}  # the caller's raw CUDA stream during a call; the reader of it
ANSWERING_ROLES = ("reference", "task")
"""The roles whose worker answers for a task's reference (`op: reference`, `op: inputs`): a role "reference" worker
answers only; a role "task" worker is also the task's expert twin (one worker per slot and task), timed as an expert
is. The arena lent with such a worker's first load holds the reference's answers, never a fetched output."""
REBASES = {"load": frozenset({"Worker.fn", "Worker.ref_fn", "Worker.scale_fn", "Worker.inputs_fn", "Worker._guarded",
                              "os.environ"}),
           "watch": frozenset({"Worker._watching"}),
           "arena": frozenset({"Worker._arena", "Worker._arena_error"}),
           "reference": frozenset({"Worker._answer_key"}),
           "trim": frozenset({"Worker._answer_key"})}
"""What a request may change in the worker's own state: a load sets the entry points (the reference's, its error
scale's and its inputs' too) and the audited environment, a watch opens or closes the observation, an arena lent
before the load is taken, a reference's answer or a trim notes its size; nothing else may change."""
MAX_EXT_REPORT_HEADER = 256 << 10
"""Largest build report (its materials hold the full extension sources) sent in a reply header; a
larger one is dropped, so a huge extension compiles every time instead of overflowing the frame."""


def format_error(e: BaseException) -> str:
    """Traceback without source lines: reading them would touch the (hidden) grader files."""
    frames = [f"  File {f.f_code.co_filename!r}, line {lineno}, in {f.f_code.co_name}"
              for f, lineno in traceback.walk_tb(e.__traceback__)]
    return "\n".join([f"{type(e).__name__}: {e}"] + frames[-12:])[:4000]


def _error_kind(e: BaseException) -> str:
    text = str(e).lower()
    if isinstance(e, MemoryError) or "out of memory" in text or "can't allocate" in text:
        return "oom"
    if type(e).__name__.endswith(("CompilationError", "InterpreterError")):  # Triton compiles at first launch
        return "compile"
    return "exception"


def _grid_size(grid, kwargs) -> int | None:
    try:
        g = grid(kwargs) if callable(grid) else grid
        g = tuple(g) if isinstance(g, (tuple, list)) else (g,)
        n = 1
        for d in g:
            n *= int(d)
        return n
    except Exception:  # noqa: BLE001 - an unreadable grid counts as a launch; Triton decides
        return None


def _install_launch_hooks() -> list:
    """Count launches of @triton.jit kernels (with at least one program) by defining module."""
    hooked = []
    try:
        import triton.runtime.jit as jit

        classes = [jit.JITFunction]
        try:
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        except ImportError:
            pass
        for cls in classes:
            orig = cls.run

            def run(self, *args, _orig=orig, _streams=_STREAM, _storages=LAUNCH_STORAGES, grid, warmup, **kwargs):
                if not warmup and _grid_size(grid, kwargs) != 0:  # an empty grid runs nothing (threat 18)
                    fn = getattr(self, "fn", None)
                    key = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__name__', '?')}"
                    LAUNCHES[key] = LAUNCHES.get(key, 0) + 1
                    for a in (*args, *kwargs.values()):
                        if hasattr(a, "untyped_storage"):  # which buffers the kernel was given (threat 17)
                            _storages.add(a.untyped_storage().data_ptr())
                    caller, raw = _streams["caller"], _streams["raw"]
                    if caller is not None and raw() != caller:  # the stream Triton is about to launch on
                        FOREIGN_STREAM_LAUNCHES[key] = FOREIGN_STREAM_LAUNCHES.get(key, 0) + 1
                return _orig(self, *args, grid=grid, warmup=warmup, **kwargs)

            cls.run = boundary.sealed(run, LAUNCHES=LAUNCHES, FOREIGN_STREAM_LAUNCHES=FOREIGN_STREAM_LAUNCHES,
                                      _grid_size=boundary.sealed(_grid_size))  # Triton's: candidate code finds it
            hooked.append(cls)
    except ImportError:
        pass
    return hooked


def make_integrity_check(owners: list, strict: list = (), _vars=vars, _id=id, _callable=callable, _getattr=getattr,
                         _isinstance=isinstance, _ModuleType=type(os), _map=map, _tuple=tuple, _len=len,
                         _itemgetter=operator.itemgetter, _codeof=operator.attrgetter("__code__")):
    """A closure that lists what changed among `owners` since it was made (names, not values).

    Builtins are bound as defaults, so replacing `builtins.id` or `vars` later changes nothing here.
    It runs after every request, so the common answer (nothing changed) comes from a fingerprint
    gathered at C speed: the ids of the same values, and of the same functions' code, that the full
    snapshot records. Only a fingerprint that differs pays for the snapshot that names the change.
    """
    n_loose = len(owners)  # modules and classes: only what the grader calls (their data caches move)
    owners = list(owners) + list(strict)  # our own instances: every attribute

    held: list = []  # every value whose id is recorded stays alive: a replacement cannot reuse its id

    def _code_of(value, _type=type, _fn=types.FunctionType, _meth=types.MethodType,
                 _func_of=types.MethodType.__func__.__get__, _code=types.FunctionType.__code__.__get__):
        """A function's or a bound method's code, read through the C descriptors: any other object (one the
        candidate put in a watched place, whose attribute lookup would run its Python here) has none."""
        t = _type(value)
        if t is _meth:
            value = _func_of(value)
            t = _type(value)
        return _code(value) if t is _fn else None

    def take() -> dict:
        snap = {}
        for i, owner in enumerate(owners):
            try:
                items = list(_vars(owner).items())
            except TypeError:
                continue
            for name, value in items:
                if i >= n_loose or _callable(value) or _isinstance(value, _ModuleType):
                    snap[(i, name)] = _id(value)
                    held.append(value)
                code = _code_of(value)
                if code is not None:
                    snap[(i, name, "code")] = _id(code)
                    held.append(code)
        return snap

    def plan(snap: dict) -> tuple[list, list]:
        """Per owner, a getter of the recorded names' values; the functions whose code is recorded."""
        names: dict[int, list[str]] = {}
        funcs = []
        for key in snap:
            if len(key) == 2:
                names.setdefault(key[0], []).append(key[1])
            else:
                value = _vars(owners[key[0]])[key[1]]
                funcs.append(types.MethodType.__func__.__get__(value) if type(value) is types.MethodType else value)
        getters = [(i, _itemgetter(*ns), _len(ns)) for i, ns in names.items()]
        return getters, funcs

    def fingerprint(getters: list, funcs: list) -> tuple | None:
        try:
            parts = []
            for i, get, n in getters:
                vals = get(_vars(owners[i]))
                parts.append(_tuple(_map(_id, vals if n > 1 else (vals,))))
            parts.append(_tuple(_map(_id, _map(_codeof, funcs))))
            return _tuple(parts)
        except (KeyError, TypeError, AttributeError):  # a name gone or a function replaced: slow path
            return None

    base = take()
    getters, funcs = plan(base)
    base_print = fingerprint(getters, funcs)
    labels = [_getattr(o, "__name__", type(o).__name__) for o in owners]

    def check(rebase: bool = False, expected: frozenset = frozenset()) -> list[str]:
        # Only names that existed matter (the grader looks up nothing else); new names such as a
        # lazily imported submodule are no tampering.
        nonlocal base, getters, funcs, base_print
        if not rebase and base_print is not None and fingerprint(getters, funcs) == base_print:
            return []
        now = take()
        changed = sorted({f"{labels[k[0]]}.{k[1]}" for k in base if base[k] != now.get(k)} - expected)
        if rebase:
            base = now
            getters, funcs = plan(base)
            base_print = fingerprint(getters, funcs)
        return changed

    return check


def _text(value) -> str:
    """A candidate-made error text as a plain str (a str subclass could run code when used)."""
    return str.__str__(value)[:4000] if isinstance(value, str) else "error text was not a string"


def _fmt_error(e: BaseException) -> tuple[str, str]:
    """(kind, text) of a candidate's exception; runs on the candidate's thread (its __str__ is theirs)."""
    return _error_kind(e), format_error(e)


def _raised(box, _type=type, _str=str, _as_text=_text) -> dict:
    """The reply for candidate or reference code that raised: the kind `_error_kind` gave (oom, compile, exception:
    the parent asks a reference out of memory again) and the error's text."""
    kind, text = box[1]
    return {"ok": False, "error_kind": kind if _type(kind) is _str else "exception", "error": _as_text(text)}


CHECKED_MODULES = ("torch", "mmap", "hashlib", "threading", "random", "numpy", "ctypes", "traceback", "json", "socket",
                   "_socket", "os", "sys", "time", "gc", "signal", "struct", "array", "fcntl", "math", "importlib",
                   "importlib.util", "triton")
"""The modules the worker's main thread imports by name after a candidate has run (the fetch path's memfd helpers,
the inputs' draws): `boundary.make_modules_check` holds each to the object it was."""


def make_state_checks(torch) -> dict:
    """The parts of the interpreter's check a worker makes after each request (`Worker._state`), made now: torch's
    types' attributes, the signal handlers, the dispatcher's kernels for the worker's own ops, the modules it imports
    by name. Each returns what changed since (bench/worker_checks.py times them)."""
    return {"state": boundary.make_state_check([torch.Tensor, torch._C.TensorBase]),
            "signals": boundary.make_signal_check(), "dispatch": boundary.make_dispatch_check(torch),
            "modules": boundary.make_modules_check(list(CHECKED_MODULES))}


def _reference_call(ref, scale, inputs: list, upcast) -> tuple:
    """A reference and its error scale on the float64 copies of the inputs (runs on a candidate thread)."""
    wide = upcast(inputs)
    return ref(*wide), (scale(*wide) if scale is not None else None)


def _import_candidate(path: str, module_name: str, entry_point: str, inputs_entry: str | None = None):
    """Import the candidate module and return its entry point, and the task's own input maker when asked
    (the reference's load, in a worker that answers for a card whose inputs come from the task: `get_inputs`);
    runs on a candidate thread."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    fns = [getattr(mod, name) for name in (entry_point, inputs_entry) if name]
    for name, fn in zip((entry_point, inputs_entry), fns):
        if not callable(fn):
            raise TypeError(f"entry point {name!r} is not callable")
    return fns[0] if len(fns) == 1 else tuple(fns)


def _counts(d: dict, _type=type, _items=dict.items) -> dict:
    """A launch record's entries whose keys are plain strings and counts plain ints: the record lives where
    candidate code can reach it, and an object of its own as a key would run its code when hashed here."""
    return {k: v for k, v in _items(d) if _type(k) is str and _type(v) is int}


def _hook_outcome(hook) -> dict:
    """The extension hook put back and its record read (runs on a candidate thread)."""
    hook.uninstall()
    try:
        built, blob = hook.report()
    except Exception:  # noqa: BLE001 - candidate code ran in this interpreter: a broken report is a missed entry
        built, blob = [], b""
    return {"served": list(hook.served), "replayed": list(hook.replayed), "failed": [str(f) for f in hook.failed[:3]],
            "compiled": [dict(m) for m in hook.compiled[:3]], "built": built, "blob": blob}


def _plain(value, depth: int = 0, _type=type):
    """`value` rebuilt from exact dicts, lists, strings, numbers and bytes only, or None: data the candidate's
    objects handed over, made safe for this thread to walk (a subclass could run code when iterated)."""
    t = _type(value)
    if depth > 12:
        return None
    if t in (str, int, float, bool, bytes) or value is None:
        return value
    if t is list or t is tuple:
        return [_plain(v, depth + 1) for v in value]
    if t is dict:
        return {k: _plain(v, depth + 1) for k, v in dict.items(value) if _type(k) is str}
    return None


def _seeded_inputs(make, seed: int, torch) -> list:
    """A task's own `get_inputs()` under generators seeded from the call's seed (torch on every device,
    Python's `random`, NumPy's when loaded), so the same seed makes the same inputs; runs on a candidate
    thread of the reference worker. The generators' states are put back after."""
    import random

    np = sys.modules.get("numpy")
    saved = torch.random.get_rng_state(), random.getstate(), (np.random.get_state() if np is not None else None)
    torch.manual_seed(seed)
    random.seed(seed)
    if np is not None:
        np.random.seed(seed % (1 << 32))
    try:
        return list(make())
    finally:
        torch.random.set_rng_state(saved[0])
        random.setstate(saved[1])
        if np is not None:
            np.random.set_state(saved[2])


class Worker:
    def __init__(self, sock: socket.socket, device: str, audit_fd: int | None = None, sealed: list[str] = (),
                 reveal: list[str] = (), role: str = "candidate"):
        import gc
        import signal

        import torch
        import torch.profiler

        from grader import inputs, timing

        t_boot = time.perf_counter()
        self.sock = sock
        self.audit_fd = audit_fd
        self.sealed = list(sealed)
        self.reveal = list(reveal)
        self.device = device
        self.torch = torch
        self.cuda = device.startswith("cuda")
        torch.set_num_threads(1)  # no intra-op pool threads appear later and look like the candidate's
        if self.cuda:
            torch.cuda.init()
            torch.cuda.set_device(0)
        t_cuda = time.perf_counter()
        # float32 means float32 for every worker, expert and candidate alike: cuDNN's default of TF32
        # convolutions (10-bit mantissas) would fail an honest fp32 module against the float64 reference
        # (H200 run 19: every KernelBench convolution task) and time the expert on a downgraded path. A
        # candidate may turn it back on; its outputs then answer to the fp32 tolerance.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        # cuDNN's attention keeps its built graphs per thread (ATen's MHAGraphCache is thread_local), and every
        # call here runs on a thread of its own (grader/boundary.py): each call would build its graph again, 20-45
        # ms of host work timed as the call (H200 run 39: every attention expert, so every attention candidate
        # clipped at +3). scaled_dot_product_attention takes the flash or memory-efficient kernels instead, which
        # keep no per-thread state. A candidate may turn it back on, and pays for the builds itself.
        torch.backends.cuda.enable_cudnn_sdp(False)
        self._Tensor = torch.Tensor
        # C methods, bound now: a replaced Tensor.clone or Tensor.copy_ is never what the worker calls.
        base = torch._C.TensorBase
        self._clone, self._copy, self._view, self._contiguous = base.clone, base.copy_, base.view, base.is_contiguous
        self._nbytes = lambda t, _n=base.numel, _e=base.element_size: _n(t) * _e(t)
        self._uint8 = torch.uint8
        self._nan = float("nan")
        self._storage_ptr = (lambda t, _s=torch._C.TensorBase.untyped_storage, _p=torch._C.StorageBase.data_ptr:
                             _p(_s(t)))
        t_clock = time.perf_counter()
        self.clock = timing.DeviceClock(device, flush=role != "reference", gate=True)
        t_clocked = time.perf_counter()
        # Cached device memory goes back at a new size (`_trim`, asked by the parent outside any window; a reference
        # worker's answer does it itself when not asked): a kept worker would otherwise hold every size's blocks.
        self._empty_cache = torch._C._cuda_emptyCache if self.cuda else None  # the C function: nothing to replace
        self.role = role
        # The arena its parent lends it (wire.Arena): an answering worker's (ANSWERING_ROLES) answers go into it,
        # and a candidate worker's fetched outputs (and the inputs kept with them).
        self._arena = None
        self._arena_error = None
        self._answer_key = None  # the last size key (`_trim`; an answering worker's `_reference` trims itself)
        if self.cuda:  # the call Triton itself makes to find the stream it launches on
            self._raw_stream = boundary.sealed(lambda _get=torch._C._cuda_getCurrentRawStream,
                                               _dev=torch.cuda.current_device(): _get(_dev))
            _STREAM["raw"] = self._raw_stream  # the hook's copy (candidate code can reach it); the worker uses its own
            self._marker = torch.zeros(1, device=device)
        self._make_inputs, self._upcast, self._from_memfd = inputs.make_inputs, inputs.upcast, wire.tensors_from_memfd
        self._plan_inputs = inputs.plan_inputs
        hooked = _install_launch_hooks()
        self.kept: list = []
        self.kept_inputs: dict[int, list] = {}
        self._dest = None  # the buffer the running call's output is copied into
        self._announce = None  # tells the parent how a gated call stands (set by `serve`)
        self._watching = None  # the open observation of calls (`_watch`)
        self.fn = None  # what `call` times: the candidate's, the expert's (a role "task" worker's expert twin)
        # The reference `op: reference` answers with: a role "reference" worker's plain load sets it beside `fn`; a
        # role "task" worker's comes from a load `as` "reference", a module of its own (`_load`)
        self.ref_fn = None
        self.scale_fn = None  # a task reference's error scale, loaded beside it (`load` with "as": "scale")
        self.inputs_fn = None  # a task's own get_inputs, loaded with its reference (`load` with "inputs_entry")
        self._guarded = False
        t_profiler = time.perf_counter()
        self._warm_profiler()  # its helper threads exist before the parent takes the thread baseline
        t_warmed = time.perf_counter()
        # The call boundary (grader/boundary.py): candidate code on threads of its own, the collector off
        # (a finaliser would otherwise run wherever a collection starts), signals held on this thread.
        gc.disable()
        # What exists now is the worker's own and lives as long as it does: frozen, so each release's collection
        # (`_release`, at every size) walks only what was made since, the candidate's objects among them (CPU: 132 ms
        # a size before, walking torch's).
        gc.freeze()
        self._collect = gc.collect
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        self.runner = boundary.CandidateRunner(_FMT, boundary.torch_stacks(),
                                               self._raw_stream if self.cuda else None, self._mark)
        state, signals, dispatch, modules = make_state_checks(torch).values()
        self._state = lambda: state() + signals() + dispatch() + modules()
        import random

        owners = [sys.modules[__name__], wire, inputs, timing, guard, boundary, time, os, json, random, random.Random,
                  torch, torch.Tensor, torch.profiler, torch.profiler.profile, Worker, timing.DeviceClock, timing.StreamGate,
                  *hooked]
        if self.cuda:
            owners += [torch.cuda, torch.cuda.Event]
        # the benchmark helpers of the libraries loaded here: the grader calls none of them, but a candidate
        # that replaces a timing function it believes is the harness's tampers with the clock all the same
        bench = [m for name, m in sorted(sys.modules.items()) if m is not None
                 and name in ("triton.testing", "torch.utils.benchmark", "torch.utils.throughput_benchmark", "timeit")]
        owners += bench + [c for m in bench for c in vars(m).values() if isinstance(c, type)
                           and getattr(c, "__module__", "") == m.__name__]
        self._owners = owners
        # Where the boot went (ms; the hello tells it, `zygote._boot`): CUDA's start, the clock (its L2 flush buffer
        # and launch gate), the profiler's warm-up, and the rest (torch's settings, the launch hooks, the checks).
        parts = {"cuda": t_cuda - t_boot, "clock": t_clocked - t_clock, "profiler": t_warmed - t_profiler}
        self.boot_parts_ms = {k: round(v * 1e3, 3) for k, v in
                              {**parts, "rest": time.perf_counter() - t_boot - sum(parts.values())}.items()}

    # ---- protocol ----
    def serve(self) -> None:
        # Everything the loop needs is a local from here on: patching names later reaches none of it.
        sock, send, recv, send_fd, recv_fd, close, fmt, kind_of = (self.sock, wire.send, wire.recv, wire.send_fd,
                                                                   wire.recv_fd, os.close, format_error, _error_kind)

        def announce(stage: str, _send=send, _sock=sock, _frames=wire.GATE_FRAMES) -> None:
            """How a gated call stands ("queued", "done"), told to the parent in a frame before the reply."""
            _send(_sock, _frames[stage])

        self._announce = announce
        ops = {"load": self._load, "call": self._call, "fetch": self._fetch, "release": self._release,
               "reference": self._reference, "inputs": self._task_inputs, "watch": self._watch, "gate": self._gate,
               "arena": self._lend_arena, "trim": self._trim, "plant": self._plant}
        check = make_integrity_check(self._owners, strict=[self, self.clock])
        state = self._state
        while True:
            try:
                msg, blob = recv(sock)
            except wire.WireError:
                return
            msg["_blob"] = blob  # the extension binaries the parent offers with a load
            op = msg.get("op")
            msg.pop("_given_fd", None)
            if msg.get("_fd"):  # a call's inputs (a task's own, `given`), or an answering worker's arena with its load
                try:
                    fd_in = recv_fd(sock)
                except (OSError, wire.WireError):
                    return
                if op == "call":
                    msg["_given_fd"] = fd_in
                elif op in ("gate", "arena"):
                    msg["_lent_fd"] = fd_in
                else:
                    self._take_arena(fd_in, ANSWERING_ROLES)
            if op == "bye":
                send(sock, {"ok": True})
                return
            fd = None
            try:
                handler = ops.get(op)
                if handler is None:
                    reply = {"ok": False, "error_kind": "protocol", "error": f"unknown op {op!r}"}
                else:
                    reply, fd = handler(msg)
            except BaseException as e:  # the worker's own failure is reported, never fatal to the protocol
                reply = {"ok": False, "error_kind": kind_of(e), "error": fmt(e)}
            left = msg.pop("_given_fd", None)  # inputs a failed call never read
            if left is not None:
                close(left)
            reply["tampered"] = check(rebase=op in REBASES, expected=REBASES.get(op, frozenset()))
            # A call that ran to its end checked the interpreter after the candidate's work, and nothing of the
            # candidate's has run since (its thread has ended): the check is not made twice (2 ms a call).
            checked = reply.pop("_state_checked", False) is True
            reply["interpreter"] = reply.get("interpreter") or ([] if checked else state())
            out_blob = reply.pop("_blob", b"")
            try:
                if fd is not None:  # an fd frame carries no payload (fetch never builds anything)
                    send_fd(sock, reply, fd)
                    close(fd)
                else:
                    send(sock, reply, out_blob)
            except OSError:
                return

    def _gate(self, msg: dict):
        """Arm the clock's launch gate with the page the parent lends (grader.timing.StreamGate), once, before
        any candidate code has run; its state."""
        fd = msg.pop("_lent_fd", None)
        if fd is None:
            return {"ok": False, "error_kind": "protocol", "error": "no gate page lent"}, None
        if self._guarded or self.clock.gate is None or self.clock.gate.ok:
            os.close(fd)
            return {"ok": True, "gate": "off: lent after candidate code ran" if self._guarded
                    else "off: this worker does not time" if self.clock.gate is None else "on"}, None
        return {"ok": True, "gate": self.clock.gate.arm(fd)}, None

    def _take_arena(self, fd: int, roles: tuple[str, ...]) -> None:
        """Map the arena, once, in a worker of one of `roles` (the reference's: ANSWERING_ROLES; a fetch arena:
        "candidate"), before corpus code is imported (its page-locking runs on a thread of its own, which must exist
        and end before the thread watch starts). A refusal leaves the answers on the memfd path, as they were; the
        error is told with the first answer."""
        if self.role not in roles or self._guarded or self._arena is not None:
            os.close(fd)
            return
        try:
            self._arena = wire.ArenaView(fd, pin=self.cuda)
        except (OSError, ValueError, RuntimeError) as e:
            self._arena_error = f"{type(e).__name__}: {e}"

    def _lend_arena(self, msg: dict):
        """A candidate worker's arena for its fetches (`_fetch`), lent before its code is loaded; its state."""
        fd = msg.pop("_lent_fd", None)
        if fd is None:
            return {"ok": False, "error_kind": "protocol", "error": "no arena lent"}, None
        if self.role != "candidate" or self._guarded:
            os.close(fd)
            return {"ok": True, "arena": "off: lent after candidate code ran" if self._guarded
                    else f"off: a {self.role} worker fetches through memfds"}, None
        self._take_arena(fd, ("candidate",))
        arena = self._arena
        state = ("pinned" if arena.pinned else "mapped") if arena is not None else f"off: {self._arena_error}"
        return {"ok": True, "arena": state}, None

    def _plant(self, msg: dict):
        """The expert's compiled Triton kernels, built ahead by the service (grader.expertseed), written into this
        worker's own Triton cache: only a kept worker that runs our expert (role "expert", or "task", whose parent
        sends them for a built-in card only), and only before any code was loaded. A candidate's or a corpus
        reference's worker refuses them: the expert's code and kernels are sealed from both."""
        if self.role not in ("expert", "task") or self._guarded or self.fn is not None:
            return {"ok": False, "error_kind": "protocol",
                    "error": f"a worker of role {self.role!r} is given no kernels" if self.role not in
                    ("expert", "task") else "kernels are planted before anything is loaded"}, None
        cache = os.environ.get("TRITON_CACHE_DIR")
        if not cache:
            return {"ok": False, "error_kind": "protocol", "error": "this worker has no Triton cache of its own"}, None
        t0 = _perf_ns()
        n = expertseed.plant(expertseed.decode(msg.get("_blob") or b"{}"), cache)
        return {"ok": True, "planted": n, "ms": (_perf_ns() - t0) / 1e6}, None

    def _load(self, msg: dict):
        t0 = _perf_ns()
        # A role "task" worker loads the reference as a module of its own, apart from the expert's: KernelBench's
        # adapter casts its module-level model to float64 in place when the reference runs (grader/adapters.py), so
        # one module object shared by both would time the expert in float64 after the first answer.
        if msg.get("as") == "reference" and self.role != "task":
            return {"ok": False, "error_kind": "protocol",
                    "error": f"a worker of role {self.role!r} loads no separate reference (a task worker does)"}, None
        module = msg.get("as") if msg.get("as") in ("scale", "reference") else "candidate"
        # the reference's own load: a role "reference" worker's plain load, or a role "task" worker's `as` "reference"
        answers = module == "reference" or (module == "candidate" and self.role == "reference")
        path = os.path.join(os.getcwd(), f"{module}.py")
        with open(path, "w") as f:
            f.write(msg["source"])
        # Before the candidate imports the loader names; the offer holds only entries the parent
        # verified for this exact program (grader.compile_cache).
        hook = ExtensionHook(os.getcwd(), msg.get("ext_offer") or [], msg.get("_blob") or b"")
        hook.install()
        if self.audit_fd is not None and not self._guarded:
            self._guarded = True
            guard.install(self.audit_fd, self.sealed, self.reveal)
            guard.watch_threads(self.audit_fd)
            guard.watch_signals(self.audit_fd)
            guard.seal_observation(self.audit_fd, self.torch)
            guard.seal_raw_memory(self.audit_fd)
            os.environ = guard.AuditedEnviron(os.environ, self.audit_fd)
        inputs_entry = msg.get("inputs_entry") if answers else None
        box = self.runner.run(_import_candidate, (path, module, msg.get("entry_point", "run"), inputs_entry))
        changed = self._state()
        if changed or box[2]:  # nothing the candidate may have replaced runs on this thread
            self.runner.bury(box)
            return {"ok": True, "interpreter": changed + ([box[2]] if box[2] else [])}, None
        # torch's own loaders are back, and the hook's record read, on a candidate thread: the hook was handed
        # to the candidate's import (its objects are the candidate's to change), so only plain data crosses.
        done = self.runner.run(_hook_outcome, (hook,))
        self.runner.bury(done, hook)
        outcome = _plain(done[0]) if done[1] is None else None
        if not isinstance(outcome, dict):  # the hook's record was broken: only missed cache entries
            outcome = {"served": [], "failed": [], "built": [], "blob": b""}
        ext = {"ext_served": list(outcome.get("served") or []), "ext_replayed": list(outcome.get("replayed") or []),
               "ext_failed": [_text(f)[:800] for f in (outcome.get("failed") or [])[:3]],
               "ext_compiled": list(outcome.get("compiled") or [])[:3]}
        built, blob = outcome.get("built") or [], outcome.get("blob") or b""
        if built and type(blob) is bytes and len(wire._dumps({"b": built})) <= MAX_EXT_REPORT_HEADER \
                and len(blob) <= wire.REPLY_PAYLOAD_CAP["load"]:
            ext.update(ext_built=built, _blob=blob)  # a failed load's too: its conclusive build failures are kept
        if box[1] is not None:
            self.runner.bury(box)
            return {"ok": False, "error_kind": "compile", "error": _text(box[1][1]), **ext}, None
        if module == "scale":
            self.scale_fn = box[0]
        else:
            fn, inputs_fn = box[0] if inputs_entry else (box[0], None)
            if module == "candidate":
                self.fn = fn
            if answers:
                self.ref_fn = fn
                if inputs_entry:
                    self.inputs_fn = inputs_fn
        self.runner.bury(box)
        return {"ok": True, "load_ms": (_perf_ns() - t0) / 1e6, **ext}, None

    def _snapshot(self, box: list, _type=type):
        """The output's bytes, copied by torch's C methods into a buffer the worker allocated before the
        call, queued right behind the call's end event (the candidate's function has returned and none of
        its Python runs on this thread; device work its thread still queues lands after the copy or in
        the charged done gap); later reads never touch the candidate's tensor. An output of another size
        or layout is cloned instead (it fails the shape check anyway)."""
        out, dest = box[0], self._dest
        if _type(out) is not self._Tensor:
            return None
        if dest is not None and self._contiguous(out) and self._nbytes(out) == self._nbytes(dest):
            self._copy(dest, self._view(self._view(out, -1), self._uint8))
            return dest
        return self._clone(out)

    def _call(self, msg: dict, _type=type, _name=type.__dict__["__name__"].__get__, _launches=LAUNCHES,
              _storages=LAUNCH_STORAGES, _foreign=FOREIGN_STREAM_LAUNCHES, _streams=_STREAM, _now=_perf_ns,
              _unwatched=_UNWATCHED, _call_mark=observe.CALL_MARK, _failed=_raised):
        # Everything this method reaches once the candidate's code has run is bound above (or is the
        # worker's own, unreachable from a candidate): a module global replaced meanwhile never runs here.
        t_begin = _now()
        # The last call's objects are dropped on the parked thread before anything is allocated: the new
        # inputs take the old inputs' memory (as a timing loop that reuses buffers would: threat 13), the
        # poison below covers what the old output held.
        parked = self.runner.park()
        t_parked = _now()
        gated, gate = msg.get("gated") is True, self.clock.gate
        own_draw = gated and gate is not None and gate.ok and msg.get("given") is None
        # Asked to (`Effort.fill_behind`), a gated call allocates its inputs, output and poison first, then closes its
        # gate and queues their draw behind it: the device draws them in the call's own device window, and the call
        # needs no draw window (grader 0.18.0). Nothing behind the gate allocates, so nothing there waits for the
        # device. Asked to (`Effort.draw_before_gate` off), the gate closes before the inputs are even allocated:
        # an allocation behind a closed gate that waits for the device stalls the call (H200 run 41). Else the
        # inputs are drawn and synchronised before the gate closes. A task's own inputs come from the host, whose
        # copy would wait for the gate: they are always ready before it closes.
        # Never in an observed call: the observation's mark waits for the device, behind a gate closed for the draw.
        fill_behind = own_draw and msg.get("fill_behind") is True and self._watching is None
        early = own_draw and not fill_behind and msg.get("behind") is True and gate.close()
        try:
            nbytes = int(msg["out_nbytes"])
            fill = None
            if fill_behind:
                inputs, fill = self._plan_inputs(msg["specs"], msg["seed"], self.device)
            elif msg.get("given") is not None:
                inputs = self._given(msg["given"], msg.pop("_given_fd", None))
            else:
                inputs = self._make_inputs(msg["specs"], msg["seed"], self.device)
            self._dest = self.torch.empty(nbytes, dtype=self._uint8, device=self.device) if nbytes > 0 else None
            # The poison hands the next allocation of the output's size NaN-filled memory (stale results fail).
            poison = self.torch.empty(((nbytes + 3) // 4,), dtype=self.torch.float32, device=self.device) \
                if nbytes > 0 else None
            prelude = None
            if fill is not None:  # every allocation made: close the gate; the draws queue behind it
                early = gate.close()
                if early:  # once the parent has heard "drawn" (`DeviceClock.time_call`): a launch that waits for
                    # the device (a kernel's first load, H200 run 63) is then let through by the parent's patience
                    prelude, poison = self._drawn_behind(fill, poison), None
                else:
                    fill()
            if poison is not None:
                poison.fill_(self._nan)
            del poison
            if not early:
                self.clock.sync()  # inputs ready; the timed call flushes L2 itself
            t_ready = _now()
        except BaseException:  # the worker's own preparation failed (out of memory): nothing was tampered with
            if early:
                gate.open()  # no call follows: nothing is left held
            self._dest = None
            self.runner.release(parked)
            raise
        launches_before = _counts(_launches)
        # The hook's containers are within candidate code's reach: what they hold is dropped on a candidate
        # thread (buried), never here, where an object's finaliser would run the candidate's code.
        self.runner.bury(list(_foreign.items()), list(_storages), _streams.get("caller"))
        _foreign.clear()
        _storages.clear()
        caller_stream = _streams["caller"] = self._raw_stream() if self.cuda else None
        work, dest, watch, announce = (parked, self.fn, inputs), self._dest, self._watching, self._announce
        # Asked to (`Effort.settled_pairs`), a told gated call says "settled" once the device is synchronised again
        # after "done", before its interpreter is checked: the parent lets the pair's twin through then, and the
        # check runs beside it (a change it finds floors the attempt). Bound before the candidate's code runs.
        heard, say, sync = [False], announce, self.clock.sync
        if gated and announce is not None and msg.get("settled") is True:
            def announce(stage: str, _say=say, _heard=heard) -> None:
                if stage == "done":
                    _heard[0] = True
                _say(stage)
        # Asked to (`Effort.traced_release`), a call says "released" once it is over and the device synchronised
        # again, before its observation's sessions close (a traced call's: CUPTI's records read) and its interpreter
        # is checked: the parent's draw window for it ends there. Bound before the candidate's code runs.
        release = msg.get("released") is True and say is not None
        try:
            def timed():  # the call's window in the observation: the ops and kernels inside it are its own
                with self._mark(_call_mark) if watch is not None else _unwatched:
                    got = self.clock.time_call(self.runner.go, work, snapshot=self._snapshot,
                                               settle=self.runner.settle, gated=gated, announce=announce,
                                               prelude=prelude)
                if release:  # what the call's thread queued as it ended is over too
                    sync()
                    say("released")
                return got

            box, snap, ms, host_ms, gap_ms = (timed() if watch is None else
                                              watch.call(msg.get("tag", ""), bool(msg.get("trace")), timed))
        finally:
            self.runner.bury(_streams.get("caller"))
            _streams["caller"] = None
            self._dest = None
        t_timed = _now()
        if heard[0]:  # the device synchronised by a function bound before the call (as "done"'s was), then told
            sync()
            say("settled")
        changed = self._state() + ([box[2]] if box[2] else [])  # first: builtins are the candidate's until checked
        if gated and not heard[0]:  # what the call's thread queued as it ended (its finalisers, after "done") is
            sync()  # over before the reply: a pair's twin is let through only then (`launcher.let_through_together`)
        t_checked = _now()
        self.runner.bury(box, inputs)
        if changed:  # nothing the candidate returned is looked at: its type's methods may be replaced
            return {"ok": True, "interpreter": changed, "idx": -1, "ms": ms, "host_ms": host_ms, "gap_ms": gap_ms,
                    "meta": {"type": "?"}, "span_ms": (_now() - t_begin) / 1e6}, None
        if box[1] is not None:
            return _failed(box), None
        launched = {k: v - launches_before.get(k, 0) for k, v in _counts(_launches).items()
                    if v != launches_before.get(k, 0)}
        # Read after the call: a carve-out the call made is found, and undone, before the next one.
        l2_persisting = self.clock.take_persisting_l2(caller_stream)
        out = box[0]
        meta = {"type": "Tensor" if snap is not None else _name(_type(out))}
        own_output = False
        if snap is not None:  # the state check passed: the tensor type's attributes are torch's own
            meta.update(shape=list(out.shape), dtype=str(out.dtype).removeprefix("torch."), device=str(out.device))
            own_output = self._storage_ptr(out) in {p for p in _storages if _type(p) is int}
            if snap is dest:  # the raw bytes, seen as the output they copy
                snap = snap.view(out.dtype).view(out.shape)
        idx = len(self.kept)
        self.kept.append(snap if msg.get("keep", True) else None)
        if msg.get("keep_inputs"):
            self.kept_inputs[idx] = [self._clone(t) for t in inputs if _type(t) is self._Tensor]
        return {"ok": True, "idx": idx, "ms": ms, "host_ms": host_ms, "gap_ms": gap_ms, "meta": meta, "launches": launched,
                "own_output": own_output, "foreign_stream": sorted(_counts(_foreign)),
                "l2_persisting_bytes": l2_persisting,
                "span_ms": (_now() - t_begin) / 1e6, "_state_checked": True, "marks_ns": self.clock.marks_ns(),
                # where the worker's span went (ms): park a thread, draw inputs, the timed call (host), the
                # interpreter check, the rest (launch counts, L2, the output's metadata)
                "parts_ms": [(t_parked - t_begin) / 1e6, (t_ready - t_parked) / 1e6, (t_timed - t_ready) / 1e6,
                             (t_checked - t_timed) / 1e6, (_now() - t_checked) / 1e6],
                # a traced call's sessions (`observe.Observation.call`): where its "timed call" part went
                "trace_ms": watch.trace_ms if watch is not None and msg.get("trace") is True else None}, None

    def _drawn_behind(self, fill, poison):
        """A call's draw and its poison, to queue behind its closed gate: the poison's memory goes back to the
        cache once queued, for the candidate's output to take NaN-filled."""
        held = [poison]

        def prelude(_nan=self._nan) -> None:
            fill()
            left = held.pop()
            if left is not None:
                left.fill_(_nan)
        return prelude

    def _begin_session(self, device: bool, _worker_mark=observe.WORKER_MARK) -> None:
        """The mark that names this thread in a session, and in a device session the marker kernel that names
        the caller's stream (the session's first kernel)."""
        with self._mark(_worker_mark):
            if device and self.cuda:
                self.clock._zero(self._marker)
                self.clock.sync()

    def _watch(self, msg: dict, _observation=observe.Observation):
        """Open or close the observation of calls (grader/observe.py): every call of a size, of the candidate
        and of its twin alike, is made under a profiler session of all threads' ops, so being watched is never
        news to a candidate, whichever call it is and whatever it asks torch (GRADER.md, the call boundary);
        a call the parent marks `trace` runs in a session with the device's kernels too. Closing returns, per
        call in order, the aten ops its candidate thread ran, the kernels the device ran inside its window
        (traced calls), those on another stream than the caller's, and whether the call's marks are in the
        record (a record cut short means the observation was switched off)."""
        report = None
        if self._watching is not None:  # a twin's record is not judged: it is only stopped (`report`: false)
            watching, self._watching = self._watching, None
            report = watching.report() if msg.get("report", True) else (watching.stop() or [])
        if msg.get("on"):
            self._watching = _observation(self._recorder, self._begin_session)
            return {"ok": True}, None
        if report is None:
            return {"ok": False, "error_kind": "protocol", "error": "no observation was open"}, None
        return {"ok": True, "calls": report}, None

    def _fetch(self, msg: dict):
        idx = int(msg["idx"])
        out = self.kept[idx] if 0 <= idx < len(self.kept) else None
        if out is None:
            return {"ok": False, "error_kind": "protocol", "error": f"no kept output {idx}"}, None
        parts = [out] + list(self.kept_inputs.get(idx, []) if msg.get("with_inputs") else [])
        # Into the lent arena when they fit (page-locked: a copy at the link's speed, where a fresh memfd faults in
        # and zeroes every page first: H200 run 40, 0.1 s a fetch of a 128 MB output); the parent copies them out
        # before any candidate code runs again. Only a candidate worker's arena is a fetch arena: a role "task"
        # worker's is the reference's, where an expert fetch would overwrite an answer the parent may not have read,
        # and its parent (`session._expert_output`) reads the expert's output from a memfd.
        metas = self._arena.write(parts) if self._arena is not None and self.role == "candidate" else None
        if metas is not None:
            return {"ok": True, "tensors": metas, "arena": True}, None
        metas, fd = wire.tensors_to_memfd(parts)
        return {"ok": True, "tensors": metas}, fd

    def _given(self, given: dict, fd: int | None) -> list:
        """The inputs the parent sent with this call: a task's own `get_inputs()` made them in the task's
        reference worker (`_task_inputs`); tensors come through a sealed memfd, numbers in the layout."""
        if fd is None:
            raise RuntimeError("the call named given inputs but carried no file descriptor")
        tensors = self._from_memfd(given["metas"], fd, self.device)
        return [tensors[int(e["t"])] if "t" in e else e["n"] for e in given["layout"]]

    def _own_inputs(self, seed: int, _type=type):
        """(inputs, None) from the task's own `get_inputs()` under `seed`, or (None, the error reply)."""
        if self.inputs_fn is None:
            return None, {"ok": False, "error_kind": "protocol", "error": "the task's get_inputs is not loaded"}
        box = self.runner.run(_seeded_inputs, (self.inputs_fn, seed, self.torch))
        self.runner.bury(box)
        changed = self._state() + ([box[2]] if box[2] else [])
        if changed:
            return None, {"ok": False, "error_kind": "interpreter", "error": "; ".join(changed)[:2000]}
        if box[1] is not None:
            return None, {"ok": False, "error_kind": "exception", "error": "get_inputs: " + _text(box[1][1])}
        values = box[0]
        kinds = [_type(v) for v in values]
        if not values or any(k is not self._Tensor and k not in (int, float, bool) for k in kinds):
            return None, {"ok": False, "error_kind": "exception",
                          "error": f"get_inputs returned {[k.__name__ for k in kinds][:8]}: tensors and plain "
                                   "numbers only"}
        return values, None

    def _own_layout(self, values: list, _type=type) -> tuple[list, dict]:
        """Layout, sealed memfd and digest of a task's own inputs: the digest is the blake2b of their bytes as
        the memfd holds them, and of the layout (shapes, dtypes, numbers)."""
        tensors = [v for v in values if _type(v) is self._Tensor]
        layout, i = [], 0
        for v in values:
            if _type(v) is self._Tensor:
                layout.append({"t": i})
                i += 1
            else:
                layout.append({"n": v})
        metas, fd = wire.tensors_to_memfd(tensors)
        return layout, {"metas": metas, "fd": fd, "digest": wire.memfd_digest(fd, [metas, layout])}

    def _task_inputs(self, msg: dict):
        """A task's own inputs for `seed` (its `get_inputs()`, seeded), for the parent to hand to the
        candidate and the expert."""
        values, err = self._own_inputs(int(msg["seed"]))
        if err is not None:
            return err, None
        layout, packed = self._own_layout(values)
        return {"ok": True, "given": {"metas": packed["metas"], "layout": layout}, "digest": packed["digest"]}, \
            packed["fd"]

    def _reference(self, msg: dict, _type=type, _now=_perf_ns):
        """A task reference's answer (and error scale) in float64 on the inputs of `seed`. The reference is
        corpus code, as untrusted as a candidate: it runs here, in a sandboxed worker of its own, on a
        thread of its own, untimed; the sealed parent receives only the tensors, through a sealed memfd.
        With `task_inputs`, the inputs are the task's own `get_inputs()` made again under the same seed;
        their digest goes back, so the parent sees whether they are what the candidate was given.

        `gated` (`Effort.gated_reference`): the answer's device work is queued behind the worker's closed launch gate
        and the parent opens it in a check window of its own, which then holds the device work alone, not this
        worker's host work (`_gated_answer`). Only drawn inputs, into a page-locked arena; else as ungated."""
        if self.ref_fn is None:
            return {"ok": False, "error_kind": "protocol", "error": "no reference loaded"}, None
        t_begin = _now()
        # The cached device memory goes back when the size changes, not after every answer: a size's answers reuse
        # its blocks (H200 run 45: 10 ms an answer to free and allocate them again), and a kept worker idles on one
        # size's memory at most. The last answer and inputs, buried, are dropped as that thread starts.
        if self.role in ANSWERING_ROLES:
            self._trim({"key": msg.get("key")})  # the parent's size key: asked by `session._trim` first, a no-op
        t_emptied = _now()
        gate = self.clock.gate
        if msg.get("gated") is True:  # asked gated, it does no device work outside the gate: else it says so first
            if gate is None or not gate.ok or msg.get("task_inputs") or self._arena is None or not self._arena.pinned:
                return {"ok": False, "error_kind": "gate", "error": "this answer cannot be queued behind a gate"}, None
            return self._gated_answer(msg, gate, t_begin, t_emptied)
        digest = None
        if msg.get("task_inputs"):
            values, err = self._own_inputs(int(msg["seed"]))
            if err is not None:
                return err, None
            _, packed = self._own_layout(values)
            os.close(packed["fd"])
            digest = packed["digest"]
            inputs = [v.to(self.device) if _type(v) is self._Tensor else v for v in values]
            del values
        else:
            inputs = self._make_inputs(msg["specs"], msg["seed"], self.device)
        t_inputs = _now()
        box = self.runner.run(_reference_call, (self.ref_fn, self.scale_fn, inputs, self._upcast))
        self.runner.bury(box, inputs)
        # Every stream's work of it done, inside the caller's window: the answer's copy below waits for this stream
        # only, and a kernel the reference left on a stream of its own would run on beside another slot's timed call.
        self.clock.sync()
        t_run = _now()
        refused = self._answer_refused(box)
        t_checked = _now()
        if refused is not None:
            return refused, None
        parts = [t for t in box[0] if t is not None]
        metas, fd = (self._arena.write(parts) if self._arena is not None else None), None
        if metas is None:
            metas, fd = wire.tensors_to_memfd(parts)
        t_written = _now()
        scaled = box[0][1] is not None
        del parts, box, inputs
        return self._answer_reply(metas, fd, scaled, digest, (t_begin, t_emptied, t_inputs, t_run, t_checked, t_written))

    def _gated_answer(self, msg: dict, gate, t_begin: int, t_emptied: int, _now=_perf_ns):
        """`_reference` through the launch gate: the inputs are allocated and the gate closed before "drawn"; their
        draw and the reference's run are queued behind it and, once the interpreter is checked (nothing the
        reference returned is touched before), the answer's copy into the page-locked arena; then "queued". Once
        the parent has opened the gate, the device finishes them, and "done". A reference that waits for the device
        on the host (a synchronising call, an allocation or a kernel's first load that waits) waits for the parent's
        patience, which opens the gate inside the check window (`WorkerConn._let_through`): no device work queued on
        the worker's stream runs outside one. A kernel the reference puts on a stream of its own is not behind the
        gate and runs at once, in no window (docs/call-boundary.md, "A reference's side stream"): why this is off by
        default."""
        inputs, fill = self._plan_inputs(msg["specs"], msg["seed"], self.device)
        if not gate.close():  # it would not close: nothing was drawn, and the parent asks again, ungated
            return {"ok": False, "error_kind": "gate", "error": "the launch gate would not close"}, None
        self._announce("drawn")
        box = refused = metas = None
        t_inputs = t_run = t_checked = _now()
        try:
            fill()
            t_inputs = _now()
            box = self.runner.run(_reference_call, (self.ref_fn, self.scale_fn, inputs, self._upcast))
            t_run = _now()
            refused = self._answer_refused(box)
            t_checked = _now()
            if refused is None:  # the copy, queued behind the run; None when it does not fit: a memfd after "done"
                metas = self._arena.write([t for t in box[0] if t is not None], non_blocking=True)
        finally:  # whatever happened, the parent opens the gate, and the device is done before anything else
            self._announce("queued")
            gate.wait_open()
            self.clock.sync()
            gate.closed = False
            self._announce("done")
        t_done = _now()
        self.runner.bury(box, inputs)
        if refused is not None:
            return refused, None
        fd = None
        if metas is None:
            metas, fd = wire.tensors_to_memfd([t for t in box[0] if t is not None])
        return self._answer_reply(metas, fd, box[0][1] is not None, None,
                                  (t_begin, t_emptied, t_inputs, t_run, t_checked, t_done), gated=True)

    def _answer_refused(self, box, _type=type) -> dict | None:
        """What refuses a reference's answer: the interpreter changed, the reference raised, or it returned other than
        tensors; None when the answer may be sent."""
        changed = self._state() + ([box[2]] if box[2] else [])
        if changed:
            return {"ok": False, "error_kind": "interpreter", "error": "; ".join(changed)[:2000]}
        if box[1] is not None:
            return _raised(box)
        parts = [t for t in box[0] if t is not None]
        if any(_type(t) is not self._Tensor for t in parts):
            return {"ok": False, "error_kind": "exception",
                    "error": f"the reference returned {[_type(t).__name__ for t in parts]}, not tensors"}
        return None

    def _answer_reply(self, metas, fd, scaled: bool, digest, marks: tuple, gated: bool = False):
        t_begin, t_emptied, t_inputs, t_run, t_checked, t_written = marks
        return {"ok": True, "tensors": metas, "scaled": scaled, "arena": fd is None, "inputs_digest": digest,
                "arena_pinned": bool(self._arena and self._arena.pinned), "arena_error": self._arena_error,
                "gated": gated,
                # where the answer's time went (ms): giving the cached device memory back (at a new size), the
                # inputs, the reference's run, the interpreter check, the copy to this side (gated: the inputs and the
                # run are their launches behind the gate, the copy's time the wait for the gate and the device)
                "parts_ms": [(t_emptied - t_begin) / 1e6, (t_inputs - t_emptied) / 1e6, (t_run - t_inputs) / 1e6,
                             (t_checked - t_run) / 1e6, (t_written - t_checked) / 1e6]}, fd

    def _trim(self, msg: dict):
        """Give the cached device memory back when `key` (a size) differs from the last one's. The parent asks at each
        new size outside any window, so the time the driver takes to free and map memory again holds no other slot's
        timed calls off (H200 run 66: 17 ms an answer inside a reference's check window, on average). Its own device
        work is done: the last call synchronised. What it buried is dropped as that thread starts. `keep` (the
        parent's `Effort.keep_size_memory`, the device having room): the size is noted and the memory kept, so
        that the blocks of the sizes it worked at before serve the next answers."""
        key = msg.get("key")
        moved = self._empty_cache is not None and key != self._answer_key
        emptied = moved and msg.get("keep") is not True
        # An answering worker (ANSWERING_ROLES): on a thread of its own, where what was buried (its last answer and
        # inputs, and a task worker's last expert call too) is dropped first, so that their blocks are given back too
        if emptied and self.role in ANSWERING_ROLES:
            self.runner.bury(self.runner.run(self._empty_cache, ()))
        elif emptied:  # a timing worker only: on this thread, never on the candidate's, where its hooks may wait
            self._empty_cache()
        self._answer_key = key
        return {"ok": True, "emptied": emptied, "kept": moved and not emptied}, None

    def _release(self, msg: dict):
        self.kept.clear()
        self.kept_inputs.clear()
        box = self.runner.run(self._collect, ())  # cycles the candidate made are finalised on its own thread
        self.runner.bury(box)
        return {"ok": True, "interpreter": [box[2]] if box[2] else []}, None

    # ---- helpers ----
    def _warm_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._all_threads = {}
        try:  # record the candidate's thread too (torch >= 2.6); without it the op list would be empty
            from torch._C._profiler import _ExperimentalConfig

            self._all_threads = {"experimental_config": _ExperimentalConfig(profile_all_threads=True)}
        except (ImportError, TypeError):
            pass
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self._recorder = observe.Recorder(self.torch, self.cuda, self._all_threads)
        self._mark = self.torch._C._profiler._RecordFunctionFast  # a C type: its enter and exit are not names
        with profile(activities=acts, **self._all_threads):
            with self._mark("kerneltraj-warm"):
                self.torch.zeros(8, device=self.device).add_(1)
        self.clock.sync()


# What runs on a candidate thread, or is handed to candidate code, holds none of this module's globals
# (boundary.sealed): the frames and hooks a candidate can find lead to nothing the main thread calls.
_import_candidate = boundary.sealed(_import_candidate, importlib=importlib, sys=sys)
_seeded_inputs = boundary.sealed(_seeded_inputs, sys=sys)
_reference_call = boundary.sealed(_reference_call)
_hook_outcome = boundary.sealed(_hook_outcome)
_FMT = boundary.sealed(_fmt_error, _error_kind=boundary.sealed(_error_kind),
                       format_error=boundary.sealed(format_error, traceback=traceback))
