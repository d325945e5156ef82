"""The candidate's side of a grade: runs untrusted code, never decides anything.

The worker loads the candidate, then answers `call` requests: draw fresh inputs from a seed,
poison the allocator, flush L2, run the candidate once, time it device-wide, and keep the
output. Every call looks the same to the candidate (no correctness phase vs timing phase): the
sealed parent picks which outputs to fetch and verify only after the calls return.

Clocks and hooks are captured here before candidate code loads; after each call the worker
reports whether any of them were replaced, and the parent cross-checks the reported times with
its own clock. The worker is discarded after one attempt.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
import traceback

from grader import wire

_perf_ns = time.perf_counter_ns  # captured before any candidate code exists
LAUNCHES: dict[str, int] = {}


def format_error(e: BaseException) -> str:
    """Traceback without source lines: reading them would touch the (hidden) grader files."""
    frames = [f"  File {f.f_code.co_filename!r}, line {lineno}, in {f.f_code.co_name}"
              for f, lineno in traceback.walk_tb(e.__traceback__)]
    return "\n".join([f"{type(e).__name__}: {e}"] + frames[-12:])[:4000]


def _install_launch_hooks() -> dict:
    """Count launches of @triton.jit kernels by defining module, for the own-kernel check."""
    hooked = {}
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

            def run(self, *args, _orig=orig, grid, warmup, **kwargs):
                if not warmup:
                    fn = getattr(self, "fn", None)
                    key = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__name__', '?')}"
                    LAUNCHES[key] = LAUNCHES.get(key, 0) + 1
                return _orig(self, *args, grid=grid, warmup=warmup, **kwargs)

            cls.run = run
            hooked[f"{cls.__module__}.{cls.__name__}.run"] = (cls, "run", run)
    except ImportError:
        pass
    return hooked


class Worker:
    def __init__(self, sock: socket.socket, device: str, audit_fd: int | None = None, sealed: list[str] = (),
                 reveal: list[str] = ()):
        import torch

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
        self._Tensor = torch.Tensor
        from grader import inputs
        from grader.timing import DeviceClock

        self.clock = DeviceClock(device)

        self._make_inputs = inputs.make_inputs
        self._guards = {
            "time.perf_counter_ns": (time, "perf_counter_ns", time.perf_counter_ns),
            "time.perf_counter": (time, "perf_counter", time.perf_counter),
            "time.time": (time, "time", time.time),
            "grader.inputs.make_inputs": (inputs, "make_inputs", inputs.make_inputs),
            "torch.Tensor": (torch, "Tensor", torch.Tensor),
        }
        if self.cuda:
            self._guards.update({
                "torch.cuda.synchronize": (torch.cuda, "synchronize", torch.cuda.synchronize),
                "torch.cuda.Event": (torch.cuda, "Event", torch.cuda.Event),
                "torch.cuda.Event.elapsed_time": (torch.cuda.Event, "elapsed_time", torch.cuda.Event.elapsed_time),
                "torch.cuda.Event.record": (torch.cuda.Event, "record", torch.cuda.Event.record),
            })
        self._guards.update(_install_launch_hooks())
        self.kept: list = []
        self.kept_inputs: dict[int, list] = {}
        self.fn = None
        self.module_name = "candidate"
        self.sync_overhead_ms = self.clock.sync_overhead_ms
        self._warm_profiler()  # its helper threads exist before the parent takes the thread baseline

    # ---- protocol ----
    def serve(self) -> None:
        while True:
            try:
                msg, payload = wire.recv(self.sock)
            except wire.WireError:
                return
            op = msg.get("op")
            try:
                if op == "load":
                    self._load(msg)
                elif op == "call":
                    self._call(msg)
                elif op == "fetch":
                    self._fetch(msg)
                elif op == "release":
                    self.kept.clear()
                    self.kept_inputs.clear()
                    wire.send(self.sock, {"ok": True})
                elif op == "bye":
                    wire.send(self.sock, {"ok": True})
                    return
                else:
                    wire.send(self.sock, {"ok": False, "error_kind": "protocol", "error": f"unknown op {op!r}"})
            except BaseException as e:  # the candidate's failure is reported, never fatal to the protocol
                msg_l = str(e).lower()
                kind = ("oom" if isinstance(e, MemoryError) or "out of memory" in msg_l or "can't allocate" in msg_l
                        else "compile" if type(e).__name__.endswith(("CompilationError", "InterpreterError"))
                        else "exception")
                try:
                    wire.send(self.sock, {"ok": False, "error_kind": kind,
                                          "error": format_error(e)})
                except OSError:
                    return

    def _load(self, msg: dict) -> None:
        t0 = _perf_ns()
        path = os.path.join(os.getcwd(), "candidate.py")
        with open(path, "w") as f:
            f.write(msg["source"])
        if self.audit_fd is not None:
            from grader import guard

            guard.install(self.audit_fd, self.sealed, self.reveal)
            guard.watch_threads(self.audit_fd)
            os.environ = guard.AuditedEnviron(os.environ, self.audit_fd)
        try:
            spec = importlib.util.spec_from_file_location(self.module_name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[self.module_name] = mod
            spec.loader.exec_module(mod)
            fn = getattr(mod, msg.get("entry_point", "run"))
            if not callable(fn):
                raise TypeError(f"entry point {msg.get('entry_point')!r} is not callable")
        except BaseException as e:
            wire.send(self.sock, {"ok": False, "error_kind": "compile",
                                  "error": format_error(e)})
            return
        self.fn = fn
        wire.send(self.sock, {"ok": True, "load_ms": (_perf_ns() - t0) / 1e6, "tampered": self._tampered()})

    def _call(self, msg: dict) -> None:
        torch = self.torch
        t_begin = _perf_ns()
        inputs = self._make_inputs(msg["specs"], msg["seed"], self.device)
        self._poison(msg["out_nbytes"])
        self.clock.flush_l2()
        self.clock.sync()
        ops, kernels = [], []
        launches_before = dict(LAUNCHES)
        if msg.get("profile"):
            out, ms, host_ms, ops, kernels = self._profiled(inputs)
        else:
            out, ms, host_ms = self.clock.time_call(self.fn, inputs)
        launched = {k: v - launches_before.get(k, 0) for k, v in LAUNCHES.items() if v != launches_before.get(k, 0)}
        exact = type(out) is self._Tensor
        meta = {"type": "Tensor" if exact else type(out).__name__}
        if isinstance(out, self._Tensor):
            meta.update(shape=list(out.shape), dtype=str(out.dtype).removeprefix("torch."), device=str(out.device))
        idx = len(self.kept)
        self.kept.append(out if exact else None)
        if msg.get("keep_inputs"):
            self.kept_inputs[idx] = inputs
        wire.send(self.sock, {
            "ok": True, "idx": idx, "ms": ms, "host_ms": host_ms, "meta": meta,
            "launches": launched, "ops": ops, "kernels": kernels, "tampered": self._tampered(),
            "span_ms": (_perf_ns() - t_begin) / 1e6,
        })

    def _profiled(self, inputs):
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        with profile(activities=acts) as prof:
            out, ms, host_ms = self.clock.time_call(self.fn, inputs)
        ops, kernels = set(), set()
        for ev in prof.events():
            dev = str(getattr(ev, "device_type", "")).rsplit(".", 1)[-1]
            (kernels if dev == "CUDA" else ops).add(ev.name)
        return out, ms, host_ms, sorted(ops)[:400], sorted(kernels)[:400]

    def _fetch(self, msg: dict) -> None:
        idx = int(msg["idx"])
        out = self.kept[idx] if 0 <= idx < len(self.kept) else None
        if out is None:
            wire.send(self.sock, {"ok": False, "error_kind": "protocol", "error": f"no kept output {idx}"})
            return
        parts = [out] + list(self.kept_inputs.get(idx, []) if msg.get("with_inputs") else [])
        metas, fd = wire.tensors_to_memfd(parts)
        try:
            wire.send_fd(self.sock, {"ok": True, "tensors": metas}, fd)
        finally:
            os.close(fd)

    # ---- helpers ----
    def _poison(self, nbytes: int) -> None:
        """Hand the next allocation of the output's size NaN-filled memory (stale results fail)."""
        torch = self.torch
        if nbytes <= 0:
            return
        n = (nbytes + 3) // 4
        p = torch.full((n,), float("nan"), dtype=torch.float32, device=self.device)
        del p

    def _tampered(self) -> list[str]:
        bad = []
        for name, (owner, attr, orig) in self._guards.items():
            if getattr(owner, attr, None) is not orig:
                bad.append(name)
        return bad

    def _warm_profiler(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        with profile(activities=acts):
            self.torch.zeros(8, device=self.device).add_(1)
        self.clock.sync()


