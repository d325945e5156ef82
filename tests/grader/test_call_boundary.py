"""The call boundary in the worker (grader/boundary.py, guard.py): each piece on its own, on CPU.

The planted cheats in tests/adversarial/ attack the whole; these tests pin the mechanisms, so a
change that weakens one fails here with its name. Audit hooks cannot be removed once added, so the
tests that install one run in a child interpreter.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO_ROOT


def _child(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=str(REPO_ROOT), env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))


def test_candidate_frames_never_reach_the_worker():
    from grader import boundary

    def walk():
        f, seen = sys._getframe(0), []
        while f is not None:
            seen.append((f.f_code.co_filename, f.f_code.co_name))
            f = f.f_back
        return seen

    runner = boundary.CandidateRunner(lambda e: ("exception", repr(e)))
    box = runner.run(walk, ())
    assert box[1] is None
    names = [name for _, name in box[0]]
    assert names == ["walk", "_trampoline"], box[0]  # nothing of this test's (the worker's) frames below


def test_candidate_errors_are_formatted_on_its_own_thread():
    import threading

    from grader import boundary

    seen = {}

    class Loud(Exception):
        def __str__(self):
            seen["thread"] = threading.get_ident()
            return "loud"

    def boom():
        raise Loud()

    box = boundary.CandidateRunner(lambda e: ("exception", str(e))).run(boom, ())
    assert box[1] == ("exception", "loud")
    assert seen["thread"] != threading.get_ident()


def test_candidate_thread_has_ended_when_run_returns():
    from grader import boundary
    from grader.sandbox import thread_count

    before = thread_count(os.getpid())
    for _ in range(20):
        boundary.CandidateRunner(lambda e: ("exception", "")).run(lambda: None, ())
        assert thread_count(os.getpid()) == before


def test_a_parked_thread_that_gets_no_work_is_ended():
    """The worker parks the call's thread before drawing inputs; if drawing them fails, release ends it,
    so no thread is left for the parent's count (an honest grade would be floored for it)."""
    from grader import boundary
    from grader.sandbox import thread_count

    before = thread_count(os.getpid())
    runner = boundary.CandidateRunner(lambda e: ("exception", ""))
    parked = runner.park()
    assert thread_count(os.getpid()) == before + 1
    runner.release(parked)
    assert thread_count(os.getpid()) == before


def test_a_message_to_a_worker_that_died_is_a_closed_channel_not_the_graders_error():
    """A worker killed between two messages: the parent's next send meets a broken pipe, or its read a reset, which
    must read as the worker's death (`wire.WireError`: the grade ends `crashed`), not as an `OSError` of the grader's
    own (test_faults' external SIGKILL ended the grade `infra_error` when the kill landed on a send, and on a read
    with the worker's input unread)."""
    import socket

    import pytest

    from grader import wire
    from grader.launcher import WorkerConn

    ours, theirs = socket.socketpair()
    theirs.close()
    conn = WorkerConn(sock=ours, audit=ours, pid=0)
    with pytest.raises(wire.WireError, match="closed the channel"):
        conn.request({"op": "call"}, 5.0)
    ours.close()
    # killed with our message unread: its end resets the channel, which our read of the reply meets
    ours, theirs = socket.socketpair()
    conn = WorkerConn(sock=ours, audit=ours, pid=0)
    wire.send(ours, {"op": "call"})
    theirs.close()
    with pytest.raises(wire.WireError, match="closed by peer"):
        wire.recv(ours)
    ours.close()


def test_the_parent_lets_a_gated_call_through_in_a_draw_window_then_a_device_window():
    """The parent's side of the launch gate (grader.timing.StreamGate, WorkerConn._gated), against a worker
    speaking the protocol over a socket pair: a gated call is sent inside its draw window, held until the worker
    says "drawn" (its gate is closed); it launches in no window; the gate opens only inside its device window,
    after "queued", and that window is held until "done". A call silent past the patience (it waits for the
    device) is opened anyway, inside the device window, and said to have stalled (unless it is given more patience);
    a call whose gate would not close runs whole in its draw window, and one of a worker without a gate, or one asked
    to (`whole`), in its device window; one that draws behind its gate (`fill_behind`) takes no draw window. An
    ungated call takes no window and its page is never touched; a call that fails before closing its gate or before
    queuing is answered as it is; frames out of turn are forged."""
    import contextlib
    import mmap
    import socket
    import threading
    import time as _time

    import pytest

    from grader import timing, wire
    from grader.launcher import WorkerConn

    ours, theirs = socket.socketpair()
    conn = WorkerConn(sock=ours, audit=ours, pid=0, gate=wire.GateWord())
    page = mmap.mmap(os.dup(conn.gate.fd), mmap.PAGESIZE)
    word = lambda: int.from_bytes(page[:4], "little")  # noqa: E731
    seen, windows = [], []

    @contextlib.contextmanager
    def window(kind):
        windows.append((kind, "in"))
        yield
        windows.append((kind, "out", word()))

    def worker(script: list):
        wire.recv(theirs, 0)
        for step in script:
            if step == "sleep":
                _time.sleep(5 * timing.GATE_PATIENCE_S)
            elif step == "close":  # the worker closes its gate, after its draw
                page[:4] = bytes(4)
            elif step == "look":
                seen.append((word(), list(windows)))
            else:
                wire.send(theirs, step)

    drawn, queued, done = (wire.GATE_FRAMES[k] for k in ("drawn", "queued", "done"))
    ok = {"ok": True, "ms": 0.01}
    draw_in, draw_out = ("draw", "in"), ("draw", "out", 0)
    cases = (  # (gated, the worker's script, what it sees at each look, stalled, the windows taken)
        (True, ["look", "close", drawn, queued, "sleep", "look", done, ok],
         [(1, [draw_in]), (1, [draw_in, draw_out, ("device", "in")])], False,
         [draw_in, draw_out, ("device", "in"), ("device", "out", 1)]),
        # launching waits for the device: opened after the patience, inside the device window
        (True, ["close", drawn, "sleep", "look", queued, done, ok],
         [(1, [draw_in, draw_out, ("device", "in")])], True,
         [draw_in, draw_out, ("device", "in"), ("device", "out", 1)]),
        # a gate that would not close: no "drawn", and the call runs whole in its draw window
        (True, ["look", queued, done, ok], [(1, [draw_in])], True, [draw_in, ("draw", "out", 1)]),
        (False, ["sleep", "look", ok], [(1, [])], None, []),
    )
    for gated, script, looks, stalled, taken in cases:
        seen.clear()
        windows.clear()
        page[:4] = (1).to_bytes(4, "little")
        t = threading.Thread(target=worker, args=(script,))
        t.start()
        reply, _, parent_ms = conn.request({"op": "call", "gated": gated}, 5.0, window=window)
        t.join()
        assert seen == looks, (gated, script, seen)
        assert reply["ok"] and reply.get("stalled") == stalled, reply
        assert windows == taken, windows
        if gated:
            assert 0 < reply["window_ms"] <= parent_ms
    # drawing its inputs behind its gate (`fill_behind`): no draw window, the device window from "queued" to "done";
    # a gate that would not close: the rest of the call, from its "queued", in a device window
    device_in, device_out = ("device", "in"), ("device", "out", 1)
    for script, looks, stalled in ((["look", "close", drawn, queued, "sleep", "look", done, ok],
                                    [(1, []), (1, [device_in])], False),
                                   (["look", queued, "sleep", "look", done, ok], [(1, []), (1, [device_in])], True)):
        seen.clear()
        windows.clear()
        page[:4] = (1).to_bytes(4, "little")
        t = threading.Thread(target=worker, args=(script,))
        t.start()
        reply, _, _ = conn.request({"op": "call", "gated": True, "fill_behind": True}, 5.0, window=window)
        t.join()
        assert seen == looks and reply["stalled"] is stalled and windows == [device_in, device_out], (seen, windows)
    # a launch that takes longer than the timed calls' patience, within the one it is given (an expert's compile)
    windows.clear()
    t = threading.Thread(target=worker, args=(["close", drawn, "sleep", "look", queued, done, ok],))
    t.start()
    reply, _, _ = conn.request({"op": "call", "gated": True}, 5.0, window=window, patience_s=1.0)
    t.join()
    assert reply["ok"] and reply["stalled"] is False and seen[-1] == (0, [draw_in, draw_out]), (reply, seen)
    # asked for one window (Effort.split_window off, as before 0.13.0): the device window from message to "done"
    windows.clear()
    t = threading.Thread(target=worker, args=(["close", drawn, "look", queued, done, ok],))
    t.start()
    reply, _, _ = conn.request({"op": "call", "gated": True}, 5.0, window=window, whole=True)
    t.join()
    assert reply["ok"] and reply["stalled"] is False and seen[-1] == (0, [("device", "in")]), (reply, seen)
    assert windows == [("device", "in"), ("device", "out", 1)], windows
    # a worker without a gate, asked for a gated call: the whole call is its device window
    bare = WorkerConn(sock=ours, audit=ours, pid=0)
    windows.clear()
    t = threading.Thread(target=worker, args=(["look", ok],))
    t.start()
    reply, _, _ = bare.request({"op": "call", "gated": True}, 5.0, window=window)
    t.join()
    assert reply == ok and seen[-1][1] == [("device", "in")] and windows[-1][:2] == ("device", "out")
    for failed in ([{"ok": False, "error": "out of memory"}], ["close", drawn, {"ok": False, "error": "raised"}]):
        page[:4] = (1).to_bytes(4, "little")
        t = threading.Thread(target=worker, args=(failed,))
        t.start()
        reply, _, _ = conn.request({"op": "call", "gated": True}, 5.0, window=window)
        t.join()
        assert reply == failed[-1] and word() == 1  # nothing left held
    for forged in ([done], [queued, queued], [drawn, done], [drawn, drawn], [drawn, queued, done, done]):
        t = threading.Thread(target=worker, args=(forged,))
        t.start()
        with pytest.raises(wire.FrameError):
            conn.request({"op": "call", "gated": True}, 1.0, window=window)
        t.join()
        ours.settimeout(0.1)
        with contextlib.suppress(OSError):  # what the forger sent past the refusal
            while ours.recv(1 << 16):
                pass
    conn.gate.close()


def test_a_gated_call_read_whole_gives_its_window_back_only_after_its_reply():
    """`read_whole` (`Effort.gated_check_calls`): the reply of a gated call is read inside the window of its gate's
    opening, so what the worker does after "done" (its second synchronise, the interpreter's check) is over before
    that window is given back; without it, the window ends at "done". A second "done" in place of the reply is
    forged either way."""
    import contextlib
    import socket
    import threading
    import time as _time

    from grader import timing, wire
    from grader.launcher import WorkerConn

    ours, theirs = socket.socketpair()
    conn = WorkerConn(sock=ours, audit=ours, pid=0, gate=wire.GateWord())
    drawn, queued, done = (wire.GATE_FRAMES[k] for k in ("drawn", "queued", "done"))
    ok = {"ok": True, "ms": 0.01}
    events = []

    @contextlib.contextmanager
    def window(kind):
        yield
        events.append((kind, "out", _time.perf_counter()))

    def worker(reply):
        wire.recv(theirs, 0)
        for frame in (drawn, queued, done):
            wire.send(theirs, frame)
        _time.sleep(5 * timing.GATE_PATIENCE_S)  # after "done": the worker's own checks
        events.append(("reply sent", _time.perf_counter()))
        wire.send(theirs, reply)

    for read_whole in (False, True):
        events.clear()
        t = threading.Thread(target=worker, args=(ok,))
        t.start()
        reply, _, _ = conn.request({"op": "call", "gated": True}, 5.0, window=window, read_whole=read_whole)
        t.join()
        assert reply["ok"] and reply["stalled"] is False and reply["window_ms"] > 0, reply
        sent = next(e[1] for e in events if e[0] == "reply sent")
        device_out = next(e[2] for e in events if e[0] == "device")
        assert [e[0] for e in events if e[0] in ("draw", "device")] == ["draw", "device"], events
        assert (device_out >= sent) is read_whole, (read_whole, events)
    t = threading.Thread(target=worker, args=(done,))
    t.start()
    with pytest.raises(wire.FrameError):
        conn.request({"op": "call", "gated": True}, 5.0, window=window, read_whole=True)
    t.join()
    conn.gate.close()


def test_a_released_call_gives_its_window_back_at_released_and_its_reply_is_read_after():
    """`released` (`Effort.traced_release`): the window a call holds (`released()`) ends at its worker's "released",
    ungated or gated (after its "done"), and its reply is read after it; a worker that fails first replies in its
    place (that reply, the window given back); any other frame where "released" is due is forged."""
    import contextlib
    import socket
    import threading
    import time as _time

    from grader import timing, wire
    from grader.launcher import WorkerConn

    ours, theirs = socket.socketpair()
    conn = WorkerConn(sock=ours, audit=ours, pid=0, gate=wire.GateWord())
    drawn, queued, done, released = (wire.GATE_FRAMES[k] for k in ("drawn", "queued", "done", "released"))
    ok = {"ok": True, "ms": 0.01}
    events = []

    @contextlib.contextmanager
    def held():
        events.append(("in", _time.perf_counter()))
        yield
        events.append(("out", _time.perf_counter()))

    def worker(frames):
        wire.recv(theirs, 0)
        for frame in frames:
            if frame is None:  # after "released": the sessions' close, the interpreter's check
                _time.sleep(5 * timing.GATE_PATIENCE_S)
                events.append(("reply sent", _time.perf_counter()))
            else:
                wire.send(theirs, frame)

    def call(frames, gated):
        events.clear()
        t = threading.Thread(target=worker, args=(frames,))
        t.start()
        try:
            return conn.request({"op": "call", "gated": gated, "released": True}, 5.0, released=held)
        finally:
            t.join()

    for gated, frames in ((False, [released, None, ok]), (True, [drawn, queued, done, released, None, ok])):
        reply, _, _ = call(frames, gated)
        if gated:  # what its gate's record adds
            assert reply["ok"] and reply["stalled"] is False and reply["window_ms"] > 0, reply
        else:
            assert reply == ok, reply
        out = next(e[1] for e in events if e[0] == "out")
        assert out < next(e[1] for e in events if e[0] == "reply sent"), (gated, events)
    failed = {"ok": False, "error": "out of memory"}
    for gated, frames in ((False, [failed]), (True, [failed]), (True, [drawn, queued, done, failed])):
        reply, _, _ = call(frames, gated)
        assert reply == failed and [e[0] for e in events] == ["in", "out"], (gated, reply, events)
    for gated, frames in ((False, [done, ok]), (True, [drawn, queued, done, done, ok])):
        with pytest.raises(wire.FrameError):
            call(frames, gated)
        ours.settimeout(0.1)
        with contextlib.suppress(OSError):  # what the forger sent past the refusal
            while ours.recv(1 << 16):
                pass
    conn.gate.close()


def test_a_call_whose_device_time_overruns_the_parents_window_said_done_early():
    from grader.session import WINDOW_SLACK_MS, window_holds

    assert window_holds({"ms": 0.07, "gap_ms": 0.01, "window_ms": 0.5})
    assert window_holds({"ms": 0.07, "gap_ms": 0.01})  # no window: an ungated call, or no gate
    assert window_holds({"ms": 0.5, "gap_ms": 0.0, "window_ms": 0.5 - WINDOW_SLACK_MS / 2})
    assert not window_holds({"ms": 0.3, "gap_ms": 0.3, "window_ms": 0.4})


def test_signal_handlers_cannot_be_set_from_candidate_code():
    from grader import boundary

    box = boundary.CandidateRunner(lambda e: ("exception", str(e))).run(
        signal.signal, (signal.SIGALRM, lambda *a: None))
    assert box[1] is not None and "main thread" in box[1][1]


def test_a_mode_left_on_the_candidate_thread_is_reported():
    import torch
    from torch.overrides import TorchFunctionMode

    from grader import boundary

    def enter_and_leave_on():
        TorchFunctionMode().__enter__()

    box = boundary.CandidateRunner(lambda e: ("exception", str(e)), boundary.torch_stacks()).run(enter_and_leave_on, ())
    assert box[2] and "torch function mode" in box[2]
    assert torch._C._len_torch_function_stack() == 0  # thread-local: this thread never saw it


@pytest.mark.parametrize("change, expect", [
    ("import builtins; builtins.type = lambda x: int", "builtins.type"),
    ("import builtins; builtins.kt_new_name = 1", "builtins.kt_new_name"),
    ("import torch; torch.Tensor.kt_lazy = property(lambda self: 1)", "Tensor.kt_lazy"),
    ("import gc; gc.callbacks.append(lambda *a: None)", "gc.callbacks"),
    ("import gc; gc.enable()", "gc.isenabled"),
    ("import sys; sys.meta_path.insert(0, object())", "sys.meta_path"),
    ("import sys; sys.excepthook = lambda *a: None", "sys.excepthook"),
])
def test_state_check_names_each_change(change, expect):
    proc = _child(f"""
        import gc
        import torch
        from grader.boundary import make_state_check
        gc.disable()
        check = make_state_check([torch.Tensor, torch._C.TensorBase])
        assert check() == [], check()
        {change}
        print(check())
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert expect in proc.stdout, proc.stdout


@pytest.mark.parametrize("action, kind", [
    ("sys.settrace(hook)", "set a trace function"),
    ("sys.setprofile(hook)", "set a profile function"),
    # Through the C API: the symbol's lookup is refused before the call (grader 0.9.0: CPython's eval, frame and
    # thread-state API are native switches of the observation).
    ("import ctypes; ctypes.pythonapi.PyEval_SetProfile(ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, "
     "ctypes.py_object, ctypes.c_int, ctypes.py_object)(lambda *a: 0), None)", "native switch"),
    ("sys.addaudithook(hook)", "added an audit hook"),  # refused silently by CPython's rules
    ("sys._current_frames()", "every thread's frames"),
    ("import gc; gc.get_objects()", "every object"),
    ("import gc; gc.get_referrers(sys)", "referrers"),
])
def test_guard_refuses_interpreter_hooks(action, kind):
    proc = _child(f"""
        import os, sys
        from grader import guard
        calls = []
        def hook(*args):
            calls.append(args)
        r, w = os.pipe()
        guard.install(w, [])
        try:
            {action}
        except RuntimeError as e:
            print("RAISED", e)
        open(os.devnull).close()  # an event the added hook would see; a call the trace hooks would see
        print("HOOKS", sys.gettrace(), sys.getprofile(), len(calls))
        os.close(w)
        print(os.read(r, 4096).decode())
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "HOOKS None None 0" in proc.stdout, proc.stdout
    assert "interp\t" in proc.stdout and kind in proc.stdout, proc.stdout


def test_signal_requests_are_reported():
    proc = _child("""
        import os, signal
        from grader import guard
        r, w = os.pipe()
        guard.watch_signals(w)
        signal.setitimer(signal.ITIMER_REAL, 0)
        os.close(w)
        print(os.read(r, 4096).decode())
    """)
    assert "interp\tasked for a signal handler or timer (signal.setitimer)" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("silence", ["os.dup2(os.open('/dev/null', os.O_WRONLY), w)", "os.close(w)"])
def test_a_silenced_audit_channel_ends_the_worker(silence):
    from grader.guard import AUDIT_EXIT

    proc = _child(f"""
        import os
        from grader import guard
        r, w = os.pipe()
        guard.install(w, ["/root"])
        {silence}
        try:
            os.listdir("/root")  # a reach the hook must report
        except OSError:
            pass
        print("NOT REPORTED")
    """)
    assert proc.returncode == AUDIT_EXIT, (proc.returncode, proc.stdout, proc.stderr[-1000:])
    assert "NOT REPORTED" not in proc.stdout


def test_signal_handlers_are_judged_by_where_their_code_lies():
    """A ctypes callback (anonymous memory) is the candidate's; a handler inside a library file (the
    interpreter's own, or Triton's LLVM on its first compile) is not, and becomes the new baseline."""
    proc = _child("""
        import ctypes, signal
        from grader.boundary import make_signal_check
        check = make_signal_check()
        assert check() == []
        signal.signal(signal.SIGUSR2, lambda *a: None)  # the interpreter's C handler: a library file
        print("LIBRARY", check())
        libc = ctypes.CDLL(None)
        handler = ctypes.CFUNCTYPE(None, ctypes.c_int)(lambda sig: None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(signal.SIGUSR1, ctypes.cast(handler, ctypes.c_void_p))
        print("CALLBACK", check())
        print("AGAIN", check())
    """)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LIBRARY []" in proc.stdout, proc.stdout
    assert f"a handler for signal {int(signal.SIGUSR1)} in anonymous memory" in proc.stdout, proc.stdout
    assert "AGAIN [" in proc.stdout and "AGAIN []" not in proc.stdout, proc.stdout  # never taken as baseline


def test_audit_descriptor_target_is_read_from_outside():
    from grader.sandbox import fd_target

    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert (fd_target(proc.pid, 0) or "").startswith("pipe:")
        assert fd_target(proc.pid, 987) is None
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.parametrize("source", [
    "import torch\ndef run(x):\n    return torch.ops.aten._softmax(x, -1, False)",
    "import torch\ndef run(x):\n    return torch.ops.aten._softmax.default.redispatch(None, x, -1, False)",
    "import torch.library\ndef run(x):\n    return x",
    "import torch\nlib = getattr(torch, 'library')\ndef run(x):\n    return x",
    "from torch.utils._python_dispatch import TorchDispatchMode\ndef run(x):\n    return x",
    "from torch.overrides import TorchFunctionMode\ndef run(x):\n    return x",
    "import torch\nclass T(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n"
    "        return f(*a)\ndef run(x):\n    return x",
    "import torch\ndef run(x):\n    with torch._C._DisableTorchDispatch():\n        return x",
])
def test_dispatcher_escape_hatches_are_refused_statically(source):
    from grader.contract import Reason
    from grader.statics import static_findings

    assert [f.code for f in static_findings(source)][:1] == [Reason.DISPATCHER_ESCAPE]


def test_ordinary_sources_are_not_dispatcher_escapes():
    from grader.statics import static_findings

    src = ("import torch\nimport torch.nn.functional as F\nclass K:\n    def __init__(self):\n        self._ops = []\n"
           "        self.library = None\ndef run(x):\n    return F.relu(x) + torch.exp(x)")
    assert static_findings(src) == []


def test_structural_ops_hold_no_arithmetic():
    from grader.taskcard import STRUCTURAL_OPS

    for op in ("aten::exp", "aten::sum", "aten::_softmax", "aten::cumsum", "aten::mm", "aten::add", "aten::mul",
               "aten::where", "aten::group_norm", "aten::amax", "aten::index_select", "aten::cat"):
        assert op not in STRUCTURAL_OPS


def test_every_name_for_a_reordering_view_is_a_structural_op():
    """`x.T` records `aten::numpy_T`, which was not among the structural ops: the demo's honest attention kernel
    (`k.float().T`) was floored `forbidden_op` on the CPU and on H100 run 115. Each view here (the reordering ones,
    and `ravel`, `broadcast_to`, `diagonal`, `unfold` and the splits) is recorded by torch's own profiler, as the
    worker records a call, and returns a view of the same storage (no arithmetic), so every op it records is
    structural, and allowed to a PyTorch candidate of a task that allows matmul."""
    import torch
    from torch.profiler import profile

    from grader.catalogue import load_catalogue
    from grader.taskcard import STRUCTURAL_OPS, pytorch_allowed

    a = torch.randn(4, 4, 6)
    views = [lambda x: x.T, lambda x: x.mT, lambda x: x.mH, lambda x: x.adjoint(), lambda x: x.movedim(0, 2),
             lambda x: x.moveaxis(0, 2), lambda x: x.swapaxes(0, 1), lambda x: x.swapdims(0, 1),
             lambda x: x[0].H, lambda x: x.ravel(), lambda x: x.reshape_as(x.flatten(0, 1)),
             lambda x: x[0, 0].broadcast_to(4, 6), lambda x: x.diagonal(), lambda x: x.unfold(2, 2, 2),
             lambda x: x.tensor_split(2), lambda x: x.hsplit(2), lambda x: x.vsplit(2), lambda x: x.dsplit(2)]
    for view in views:
        with profile() as prof:
            out = view(a)
        for part in out if isinstance(out, tuple) else (out,):
            assert part.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
        recorded = {e.name for e in prof.events() if e.name.startswith("aten::")}
        assert recorded and recorded <= STRUCTURAL_OPS, recorded - STRUCTURAL_OPS
        assert recorded <= pytorch_allowed(load_catalogue()["attention_fp16"])


def test_a_timed_pair_is_let_through_one_call_after_the_other_in_one_device_window():
    """`launcher.let_through_together` (`Effort.paired_windows`), against two workers speaking the protocol over
    socket pairs: both calls are sent, and both say "drawn" and "queued", before the one device window is taken;
    inside it the second gate opens only once the first call has replied whole (a first call that replies 0.2 s
    after "done" has replied before the second gate is seen open). A call that fails before closing its gate, or
    whose worker dies, is answered as it is, and the other call is let through all the same."""
    import contextlib
    import mmap
    import socket
    import threading
    import time as _time

    import pytest

    from grader import wire
    from grader.launcher import GatedCall, WorkerConn, let_through_together

    drawn, queued, done = (wire.GATE_FRAMES[k] for k in ("drawn", "queued", "done"))
    ok = {"ok": True, "ms": 0.01}
    log, windows = [], []

    @contextlib.contextmanager
    def window(kind):
        log.append(("window", kind, "in"))
        windows.append(kind)
        yield
        log.append(("window", kind, "out"))

    def pair_of(name):
        ours, theirs = socket.socketpair()
        conn = WorkerConn(sock=ours, audit=ours, pid=0, gate=wire.GateWord())
        page = mmap.mmap(os.dup(conn.gate.fd), mmap.PAGESIZE)
        return conn, theirs, page

    def worker(name, theirs, page, script):
        wire.recv(theirs, 0)
        log.append((name, "sent"))
        for step in script:
            if step == "close":
                page[:4] = bytes(4)
            elif step == "open?":  # the device reaches the call once its gate is open
                while int.from_bytes(page[:4], "little") == 0:
                    _time.sleep(0.001)
                log.append((name, "open"))
            elif step == "slow":
                _time.sleep(0.2)
            elif step == "die":
                theirs.close()
                return
            else:
                if step is ok or step.get("ok") is False:
                    log.append((name, "replied"))
                wire.send(theirs, step)

    timed = ["close", drawn, queued, "open?", done, ok]

    def run_pair(script_a: list, script_b: list, settled: bool = False) -> list:
        log.clear()
        windows.clear()
        (a, ta, pa), (b, tb, pb) = pair_of("a"), pair_of("b")
        threads = [threading.Thread(target=worker, args=("a", ta, pa, script_a)),
                   threading.Thread(target=worker, args=("b", tb, pb, script_b))]
        for t in threads:
            t.start()
        first = {"op": "call", "gated": True, "fill_behind": True, **({"settled": True} if settled else {})}
        got = let_through_together([GatedCall(a, first),
                                    GatedCall(b, {"op": "call", "gated": True, "fill_behind": True})], 5.0, window)
        for t in threads:
            t.join()
        return got

    got = run_pair(["close", drawn, queued, "open?", done, "slow", ok], timed)
    assert windows == ["device"], windows
    assert all(r[0]["ok"] and r[0]["stalled"] is False and 0 < r[0]["window_ms"] <= r[2] for r in got), got
    order = [e for e in log if e[0] != "window" or e[1:] == ("device", "in")]
    assert order.index(("a", "sent")) < order.index(("window", "device", "in"))
    assert order.index(("b", "sent")) < order.index(("window", "device", "in"))
    assert order.index(("a", "open")) < order.index(("a", "replied")) < order.index(("b", "open")), log
    # the first fails before closing its gate: answered as it is, its gate opened; the second is let through
    failed = {"ok": False, "error": "out of memory"}
    got = run_pair([failed], timed)
    assert got[0][0] == failed and got[1][0]["ok"] and windows == ["device"], (got, windows)
    # the first's worker dies once its call is queued: its channel's error, and the second is let through
    got = run_pair(["close", drawn, queued, "die"], timed)
    assert isinstance(got[0], wire.WireError) and got[1][0]["ok"], got
    with pytest.raises(ValueError):  # only calls that draw behind their gates: the others need a draw window
        let_through_together([GatedCall(pair_of("c")[0], {"op": "call", "gated": True})], 5.0, window)
    # asked for its "settled" (`Effort.settled_pairs`): the second gate opens at it, before the first's reply, which
    # is read after the window whole, with what its gate's record adds
    settled = wire.GATE_FRAMES["settled"]
    got = run_pair(["close", drawn, queued, "open?", done, settled, "slow", ok], timed, settled=True)
    assert windows == ["device"] and all(r[0]["ok"] and r[0]["stalled"] is False for r in got), got
    assert 0 < got[0][0]["window_ms"] <= got[0][2], got
    assert log.index(("a", "open")) < log.index(("b", "open")) < log.index(("a", "replied")), log
    assert log.index(("window", "device", "out")) < log.index(("a", "replied")), log
    # a worker that fails after "done" replies in its "settled"'s place: that reply, and the second let through
    got = run_pair(["close", drawn, queued, "open?", done, failed], timed, settled=True)
    assert got[0][0] == failed and got[1][0]["ok"], got
    # a frame out of turn where "settled" is due, or a "settled" never asked for: forged, and the other answered
    for script, asked in (([*timed[:5], done, ok], True), ([*timed[:5], settled, ok], False)):
        got = run_pair(script, timed, settled=asked)
        assert isinstance(got[0], wire.FrameError) and got[1][0]["ok"], (script, got)


def test_a_worker_asleep_on_its_gate_is_woken_by_the_parents_open():
    """`wire.Futex`: a timing worker waits for its gate asleep on the word (`StreamGate.wait_open`), so the other
    worker of a timed pair, on the same core, sees its own end without a spinning neighbour. The parent's `open`
    stores 1 and wakes it: a child asleep with a 5 s timeout wakes at the open, 0.2 s on; a word that already reads
    something else is not slept on."""
    import ctypes
    import mmap
    import time as _time

    from grader import wire

    word = wire.GateWord()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker's side: its own mapping of the lent page
        try:
            cell = ctypes.c_uint32.from_buffer(mmap.mmap(word.fd, mmap.PAGESIZE))
            futex, t, waits = wire.Futex(), _time.perf_counter(), 0
            while not cell.value:
                futex.wait(ctypes.addressof(cell), 0, 5.0)
                waits += 1
            os.write(w, f"{_time.perf_counter() - t:.3f} {waits}".encode())
        finally:
            os._exit(0)
    os.close(w)
    _time.sleep(0.2)
    word.open()
    took, waits = os.read(r, 64).decode().split()
    os.waitpid(pid, 0)
    os.close(r)
    assert 0.15 < float(took) < 2.0 and int(waits) == 1, (took, waits)
    t = _time.perf_counter()
    wire.Futex().wait(word._addr, 0, 5.0)  # it reads 1: no sleep
    assert _time.perf_counter() - t < 1.0
    word.close()
