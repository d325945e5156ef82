"""The call boundary inside a worker: where the candidate's Python may run, and what it may leave behind.

The worker's main thread holds the clock, draws the inputs, copies the output and speaks the
protocol. The candidate's code (its import, and each call) runs on a thread of its own, started
for that one piece of work and joined before the main thread goes on. So:
- no frame of the worker lies below a candidate frame: `sys._getframe().f_back` chains end in the
  trampoline here, whose locals are the candidate's own function, inputs and result box;
- Python signal handlers cannot be set at all (CPython allows them on the main thread only), and
  the main thread blocks signals while it works;
- torch function and dispatch modes are thread-local: a mode the candidate enters never sees the
  worker's own torch calls, and one left on its thread's stack is reported;
- objects the candidate made are dropped on a candidate thread (the next one), so a finaliser of
  theirs never runs on the main thread; the garbage collector stays off, and is run on a
  candidate thread at release.
What the candidate can still change is process-wide state (builtins, attributes of torch types,
import hooks, the collector): `make_state_check` lists those changes after every piece of
candidate work, before the main thread touches anything the candidate returned.
"""
from __future__ import annotations

import _thread
import builtins
import gc
import operator
import os
import sys
import time
import types

_START = _thread.start_new_thread  # bound before the audit hook's thread watcher wraps the module's name
_LOCK = _thread.allocate_lock
_SENTINEL = getattr(_thread, "_set_sentinel", None)  # 3.11/3.12: released when the thread's state is gone
_NATIVE_ID = _thread.get_native_id
_STAT = os.stat
_SLEEP = time.sleep
RETURN_MARK = "kerneltraj-return"
"""Recorded on a candidate thread after its work returned: an observed call without it ran unrecorded
(grader/observe.py)."""


def sealed(fn, **names):
    """A copy of `fn` whose globals hold only `names` and the builtins. Every function of the worker's that
    candidate code can find (the bottom frame of its thread, the work that thread runs, the hooks installed
    in libraries it calls) is such a copy: its globals would otherwise be a module of the grader's, whose
    classes and functions the worker's main thread calls after candidate code has run."""
    copy = types.FunctionType(fn.__code__, {"__builtins__": builtins, **names}, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def unlisted(prefixes: tuple[str, ...] = ("grader",)) -> None:
    """Take the grader's modules out of `sys.modules` (and `__main__`, which may be one of them), once the
    worker holds everything it needs: a candidate then finds no module of the worker's to change, and one it
    imports afresh is a copy nobody calls."""
    for name in [n for n in sys.modules if n.split(".")[0] in prefixes]:
        sys.modules.pop(name, None)
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    here = os.path.dirname(os.path.realpath(__file__)) + os.sep
    if main is not None and (str(getattr(spec, "name", "")).split(".")[0] in prefixes
                             or os.path.realpath(str(getattr(main, "__file__", ""))).startswith(here)):
        sys.modules["__main__"] = types.ModuleType("__main__")


def make_modules_check(names: list[str], _modules=sys.modules, _get=dict.get, _id=id, _type=type, _tuple=tuple):
    """A check that the modules the worker's main thread uses by name later (`import torch` inside a function,
    `torch.empty`) are still the ones it loaded, of the plain module type: an entry replaced in `sys.modules`
    would hand it the candidate's, and a module whose class was swapped runs the candidate's attribute lookup."""
    names = [n for n in names if n in _modules]
    mods = [_modules[n] for n in names]
    base = _tuple(_id(m) for m in mods) + _tuple(_id(_type(m)) for m in mods)

    def check() -> list[str]:
        now = _tuple(_id(_get(_modules, n)) for n in names) + _tuple(_id(_type(m)) for m in mods)
        if now == base:
            return []
        k = len(names)
        return ([f"replaced the module {n} in sys.modules" for n, a, b in zip(names, base[:k], now[:k]) if a != b]
                + [f"changed the class of the module {n}" for n, a, b in zip(names, base[k:], now[k:]) if a != b])

    return check


def _trampoline(box, go, done, parked, sentinel, graveyard, stacks, fmt, warm, mark):
    """The bottom frame of every candidate thread. Its locals are all the candidate can find below its
    own frames, and none of them belongs to the worker."""
    box[4] = _NATIVE_ID()
    if sentinel is not None:
        box[3] = sentinel()
    graveyard.clear()  # what the previous piece of candidate work left: its finalisers run here
    if warm is not None:
        warm()  # this thread's CUDA state, made now rather than inside a timed call
    parked.release()
    go.acquire()
    fn, args = box[5]
    box[5] = None
    try:
        box[0] = fn(*args)
    except BaseException as e:  # noqa: BLE001 - formatted here: its __str__ is the candidate's code
        box[1] = fmt(e)
    if mark is not None:  # absent from an observed call's record: the recording was off on this thread
        with mark(RETURN_MARK):
            pass
    if stacks is not None:
        left = [name for name, depth in zip(("torch function mode", "torch dispatch mode"), stacks()) if depth]
        if left:
            box[2] = f"left a {' and a '.join(left)} active after its code returned"
    done.release()


class CandidateRunner:
    """Runs candidate work on a fresh thread and waits until that thread has ended.

    `park` starts the thread and waits until it is ready (the last work's objects dropped, its CUDA
    state made); `go` hands it the work. Between the two the worker can poison memory and start its
    clock, so neither the thread's start nor the drop happens inside a timed call.

    The methods are closures made here, with everything they call bound now: the worker's main thread
    calls them after candidate code has run in the process, and a name they looked up then (a module
    global, a method of this class) could have been replaced to run the candidate's Python on that thread."""

    def __init__(self, fmt, stacks=None, warm=None, mark=None):
        graveyard: list = []
        self.graveyard = graveyard
        """Everything the candidate's last piece of work touched; cleared on its next thread."""
        new_lock, start, sentinel, gone = _LOCK, _START, _SENTINEL, _gone
        tramp = sealed(_trampoline, _NATIVE_ID=_NATIVE_ID, RETURN_MARK=RETURN_MARK)
        nothing = sealed(_nothing)

        def park() -> tuple:
            box = [None] * 6  # result, (kind, error text), state note, sentinel, thread id, work
            go_, done, parked = new_lock(), new_lock(), new_lock()
            go_.acquire()
            done.acquire()
            parked.acquire()
            start(tramp, (box, go_, done, parked, sentinel, graveyard, stacks, fmt, warm, mark))
            parked.acquire()
            return box, go_, done

        def go(parked: tuple, fn, args) -> list:
            """fn(*args) on the parked thread; returns [result, (kind, error text) or None, state note or None,
            ...] as soon as fn has returned. `settle` it before anything else runs; bury it once what is needed
            is copied out of it."""
            box, go_, done = parked
            box[5] = (fn, args)
            go_.release()
            done.acquire()
            return box

        def settle(box: list) -> None:
            """Wait until the thread that filled `box` has ended: its thread-local objects are gone (their
            finalisers ran there), and so is the thread, so the parent's thread count sees no leftover."""
            if box[3] is not None:
                box[3].acquire()
            gone(box[4])

        def run(fn, args) -> list:
            box = go(park(), fn, args)
            settle(box)
            return box

        def release(parked: tuple) -> None:
            """End a parked thread whose work is not needed after all (the worker failed before the call)."""
            settle(go(parked, nothing, ()))

        def bury(*objects) -> None:
            """Hand objects the candidate touched to the next candidate thread to drop."""
            graveyard.extend(objects)

        self.park, self.go, self.settle, self.run, self.release, self.bury = park, go, settle, run, release, bury


def _nothing() -> None:
    return None


def _gone(tid: int | None, wait_s: float = 2.0, _stat=_STAT, _sleep=_SLEEP, _int=int, _range=range) -> None:
    """Wait until the OS thread `tid` of this process has exited (its /proc entry is gone). A thread
    still there after `wait_s` is left for the parent's thread count to see."""
    if tid is None:
        return
    path = f"/proc/self/task/{tid}"
    for i in _range(_int(wait_s / 1e-4)):
        try:
            _stat(path)
        except OSError:
            return
        _sleep(0 if i < 100 else 1e-4)


def torch_stacks():
    """A thread's torch function and dispatch mode stack depths, read through torch's C entry points."""
    import torch

    f, d = torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack
    return sealed(lambda: (f(), d()))


def make_signal_check(_open=open, _int=int):
    """A closure listing signal handlers installed since it was made whose code is the candidate's.

    A handler runs between any two instructions of the worker's own code, so one of the candidate's
    could fill an output or move a clock after the call (threat 8). Libraries install handlers too:
    Triton's LLVM registers its crash handlers on the first compile. So a new handler is judged by
    where its code lies: inside a library file of the system or the environment is fine; anonymous
    memory or libffi's trampolines (a ctypes callback), a memfd, or a file under the worker's
    writable /tmp or /dev/shm (an extension the candidate built) is the candidate's. Every handler
    is read through libc's sigaction on every check (a replaced handler leaves the caught-signal
    mask in /proc as it was); where one lies is looked up only when one has changed."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    sigaction = libc.sigaction
    buf = ctypes.create_string_buffer(512)  # struct sigaction; the handler is its first word
    read_word = ctypes.c_void_p.from_buffer

    def handlers() -> dict[int, int]:
        out = {}
        for sig in range(1, 65):
            if sigaction(sig, None, buf) == 0:
                out[sig] = read_word(buf).value or 0
        return out

    def owner(addr: int) -> str:
        with _open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                lo, hi = (_int(x, 16) for x in parts[0].split("-"))
                if lo <= addr < hi:
                    return parts[5].strip() if len(parts) > 5 else ""
        return ""

    state = {"handlers": handlers()}

    def check() -> list[str]:
        current = handlers()
        if current == state["handlers"]:
            return []
        found = []
        for sig, addr in current.items():
            if addr in (0, 1) or addr == state["handlers"].get(sig):  # default, ignore, or as before
                continue
            path = owner(addr)
            name = path.rsplit("/", 1)[-1]
            if (not path.startswith("/") or path.startswith(("/tmp/", "/dev/shm/")) or path.endswith("(deleted)")
                    or name.startswith(("libffi", "_ctypes"))):  # libffi maps ctypes callbacks' trampolines
                                                                  # from its own file where it can
                found.append(f"a handler for signal {sig} in {path or 'anonymous memory'}")
        if not found:  # a library's own handlers (Triton's LLVM on its first compile): the new baseline
            state["handlers"] = current
        return found

    return check


def make_state_check(torch_types: list, _id=id, _vars=vars, _len=len, _tuple=tuple, _map=map, _sorted=sorted,
                     _isenabled=gc.isenabled, _gettrace=sys.gettrace, _getprofile=sys.getprofile, _sys=sys,
                     _gc=gc, _builtins=builtins, _itemgetter=operator.itemgetter):
    """A closure listing process-wide interpreter state the candidate changed since it was made.

    Watched: every name in builtins and in the given torch types' own dictionaries (new names too),
    the import hooks, the collector's state and callbacks, the interpreter's hooks, and the main
    thread's trace and profile functions. Everything it calls is bound here, before candidate code
    exists, and reads C-level state, so no code of the candidate's runs while it looks."""
    owners = [_builtins.__dict__] + [_vars(t) for t in torch_types]
    labels = ["builtins"] + [getattr(t, "__qualname__", "?") for t in torch_types]
    getters = [_itemgetter(*d.keys()) for d in owners]

    def fast_print() -> tuple | None:
        try:  # a removed name raises; a new one changes the length; a replaced one changes an id
            return _tuple((_len(d), _tuple(_map(_id, get(d)))) for d, get in zip(owners, getters))
        except KeyError:
            return None

    def scalars() -> tuple:
        return (_isenabled(), _tuple(_map(_id, _gc.callbacks)), _tuple(_map(_id, _sys.meta_path)),
                _tuple(_map(_id, _sys.path_hooks)), _id(_sys.excepthook), _id(_sys.unraisablehook),
                _id(_sys.displayhook), _id(_sys.breakpointhook), _id(_gettrace()), _id(_getprofile()))

    scalar_names = ("gc.isenabled", "gc.callbacks", "sys.meta_path", "sys.path_hooks", "sys.excepthook",
                    "sys.unraisablehook", "sys.displayhook", "sys.breakpointhook", "sys.gettrace", "sys.getprofile")
    base = [{k: _id(v) for k, v in d.items()} for d in owners]
    held = [list(d.values()) for d in owners] + [list(_gc.callbacks), list(_sys.meta_path), list(_sys.path_hooks)]
    # ^ the values compared by id stay alive, so no replacement can be handed a freed value's id
    base_scalars = scalars()
    base_print = fast_print()

    def check(_held=held) -> list[str]:
        now_scalars = scalars()
        if now_scalars == base_scalars and fast_print() == base_print:
            return []
        changed = [n for n, a, b in zip(scalar_names, now_scalars, base_scalars) if a != b]
        for label, d, before in zip(labels, owners, base):
            now = {k: _id(v) for k, v in d.items()}
            names = _sorted(str(k) for k in before.keys() | now.keys() if before.get(k) != now.get(k))
            changed += [f"{label}.{n}" for n in names[:8]]
        return changed

    return check


WORKER_OPS = frozenset({
    "_to_copy", "add_", "alias", "as_strided", "clone", "contiguous", "copy_", "detach", "empty", "empty_strided",
    "fill_", "full", "lift_fresh", "mul_", "normal_", "rand", "randint", "randn", "random_", "reshape", "resize_",
    "set_", "slice", "to", "uniform_", "view", "zero_", "zeros",
    "_softmax", "transpose", "tril_", "triu_"})  # grader.inputs.POST_STEPS
"""The aten ops the worker's main thread dispatches itself: drawing inputs, poisoning and flushing, copying
and viewing the output, cloning kept inputs, upcasting for a reference, filling a memfd."""


def make_dispatch_check(torch, ops: frozenset = WORKER_OPS) -> "callable":
    """A closure listing the worker's own aten ops whose registered kernels changed since it was made.

    A kernel registered from Python for one of them (through `torch.library` reached by an assembled
    name, or `torch._C` directly; the static check refuses only what it can read) would run the
    candidate's code on the worker's thread: while it draws the next inputs (work done before the
    clock starts) or copies the output. Every overload of each op is compared by the dispatcher's
    own registration listing, read through a C function bound now."""
    dump = torch._C._dispatch_dump
    names = tuple(sorted(n for n in torch._C._dispatch_get_all_op_names()
                         if n.startswith("aten::") and n[6:].split(".", 1)[0] in ops
                         and not any(w in n.partition(".")[2] for w in ("out", "names", "Dimname"))))
    base = tuple(map(dump, names))

    def check(_map=map, _dump=dump, _names=names, _base=base, _zip=zip) -> list[str]:
        now = tuple(_map(_dump, _names))
        if now == _base:
            return []
        return [f"registered a kernel for the worker's own op {n}" for n, a, b in _zip(_names, _base, now) if a != b]

    return check
