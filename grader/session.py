"""The sealed parent's grade of one attempt: plan the calls, verify, time, decide.

The worker only runs the candidate. Everything that decides the verdict is here: the inputs are
re-drawn from the seed on this side, the float64 reference and the expert run here, outputs are
fetched and compared here, and timed outputs are verified on a sample chosen after the calls.
"""
from __future__ import annotations

import contextlib
import math
import random
import secrets
import socket
import time
from dataclasses import dataclass

from grader import compile_cache, sandbox, wire
from grader.compare import Verdict, check_output_meta, compare
from grader.contract import (GRADER_VERSION, GradeRequest, GradeResult, Reason, SizeResult, Status, clip_speedup,
                             geomean, reward)
from grader.inputs import derive_seed, make_inputs, resolve_specs, upcast
from grader.launcher import Slot, WorkerConn
from grader.statics import static_findings
from grader.taskcard import TaskCard, bytes_floor, resolve_shape, size_key
from grader.timing import DeviceClock, median, median_ci, ratio_ci


@dataclass(frozen=True)
class Effort:
    """How much evidence a grade gathers per size (the stated confidence target lives here)."""

    check_calls: int = 2
    """Fully verified calls per size (inputs and output fetched)."""
    min_reps: int = 10
    max_reps: int = 60
    target_rel_ci: float = 0.02
    """Stop timing a size once the speedup's relative 95% CI half-width is below this."""
    verify_timed: int = 3
    """Least timed calls per size whose outputs are fetched and verified, chosen after the calls."""
    verify_fraction: float = 0.25
    """...and at least this share of them, so a candidate that turns bad after N calls is caught."""
    size_budget_s: float = 3.0
    """Wall-clock cap on one size's timing loop."""

    @staticmethod
    def for_device(cuda: bool) -> "Effort":
        # CPU sizes are tiny: every timed output is verified there.
        return Effort() if cuda else Effort(check_calls=1, min_reps=3, max_reps=3, target_rel_ci=1.0,
                                            verify_timed=3, verify_fraction=1.0, size_budget_s=2.0)


BANDWIDTH_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "cpu": 1.0e12}
"""Peak memory bandwidth used for the physical floor; datasheet numbers, deliberately optimistic."""


class Floor(Exception):
    """Raised inside a grade to end it at the floor with a status and reason."""

    def __init__(self, status: Status, code: Reason, reason: str):
        super().__init__(reason)
        self.status, self.code, self.reason = status, code, reason


class SealedTask:
    """The reference and expert of one card, loaded in the sealed parent only."""

    def __init__(self, card: TaskCard, device: str, workdir: str):
        from grader.modload import load_source

        self.card = card
        self.ref = load_source(card.reference, f"kt_ref_{card.task_id}", workdir).run
        self.expert = load_source(card.expert, f"kt_expert_{card.task_id}", workdir).run
        self.scale = (load_source(card.error_scale, f"kt_scale_{card.task_id}", workdir).run
                      if card.error_scale else None)
        self.device = device


def grade_attempt(req: GradeRequest, task: SealedTask, slot: Slot, clock: DeviceClock, *, fingerprint: dict,
                  fingerprint_id: str, device_name: str, gpu_lock, effort: Effort,
                  ext_cache: compile_cache.CompileCache | None = None,
                  build_env: compile_cache.BuildEnv | None = None) -> GradeResult:
    card = task.card
    cuda = slot.device.startswith("cuda")
    profile = req.profile if req.profile != "auto" else ("gpu" if cuda else "cpu")
    phases = {k: 0.0 for k in ("startup", "compile", "correctness", "timing", "expert", "reference", "transfer",
                                "teardown")}
    t_all = time.perf_counter()
    deadline = time.monotonic() + req.timeout_s
    sizes_out: list[SizeResult] = []
    measured: list[float] = []
    kernels: list[str] = []
    sandbox_layers: dict = {}
    conn: WorkerConn | None = None
    status, code, reason = Status.CORRECT, Reason.OK, ""

    def remaining() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Floor(Status.TIMEOUT, Reason.TIMEOUT, f"attempt exceeded its {req.timeout_s:.0f} s budget")
        return left

    try:
        if req.language == "cuda" and not cuda:
            raise Floor(Status.UNSUPPORTED_ON_BACKEND, Reason.UNSUPPORTED,
                        "CUDA candidates need a CUDA device; this grader runs on CPU")
        for finding in static_findings(req.source):
            raise Floor(Status.CHEAT_FLAGGED, finding.code, finding.detail)
        sizes = card.sizes(profile)
        if not sizes:
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"task {card.task_id} has no sizes for profile {profile}")
        t = time.perf_counter()
        try:
            conn = slot.spawn(timeout_s=min(remaining(), 300.0), memory_limit_mb=req.memory_limit_mb)
        except (OSError, wire.WireError) as e:
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"worker failed to start: {e}") from None
        sandbox_layers = conn.hello.get("sandbox", {})
        phases["startup"] = time.perf_counter() - t
        t = time.perf_counter()
        source, entry = req.source, req.entry_point
        if entry == "ModelNew":  # a KernelBench-style module: wrap it into run(*inputs)
            from grader.adapters import kernelbench_candidate_source

            source, entry = kernelbench_candidate_source(source), "run"
        # Only a worker that can neither read nor write the cache (its hello, sent before any
        # candidate code ran, says which layers it entered) is offered entries or heard about builds.
        use = (ext_cache is not None and build_env is not None
               and compile_cache.sealed_from(sandbox_layers, ext_cache.root))
        offer, blob = _offer(ext_cache, source, build_env) if use else ([], b"")
        if ext_cache is not None:  # recorded before the load, so a load that fails or hangs shows it too
            sandbox_layers = dict(sandbox_layers, ext_cache={"sealed": use, "offered": len(offer)})
        reply, built, _ = _request(conn, {"op": "load", "source": source, "entry_point": entry, "ext_offer": offer},
                                   remaining, blob)
        _check_guards(conn, reply, slot)
        if not reply.get("ok"):
            raise Floor(Status.COMPILE_ERROR, Reason.COMPILE, _tail(reply.get("error", "")))
        if ext_cache is not None:
            sandbox_layers["ext_cache"].update(_ext_record(ext_cache, source, build_env, use, offer, reply, built))
        phases["compile"] = time.perf_counter() - t
        rng = random.Random(secrets.randbits(64))  # sample choice the worker cannot predict
        first_call = True
        for size, hidden in sizes:
            sr, m = _grade_size(req, task, conn, slot, clock, size, hidden, effort, rng, remaining, phases,
                                first_call, gpu_lock, device_name, kernels)
            first_call = False
            sizes_out.append(sr)
            if m is not None:
                measured.append(m)
            _request(conn, {"op": "release"}, remaining)
    except Floor as f:
        status, code, reason = f.status, f.code, f.reason
    except (socket.timeout, TimeoutError):
        status, code, reason = Status.TIMEOUT, Reason.TIMEOUT, f"worker gave no answer within the {req.timeout_s:.0f} s budget"
    except wire.WireError:
        status, code, reason = Status.CRASHED, Reason.CRASH, "worker died mid-grade"
    finally:
        t = time.perf_counter()
        if conn is not None:
            late = conn.drain_audit()
            how = slot.finish(conn)
            if status is Status.CRASHED:
                reason = f"worker died mid-grade ({how})"
            if late and status is not Status.CHEAT_FLAGGED:
                f = _audit_floor(late[0])
                status, code, reason = f.status, f.code, f.reason
        phases["teardown"] = time.perf_counter() - t
    phases["total"] = time.perf_counter() - t_all
    speedups = [s.speedup for s in sizes_out if s.speedup is not None]
    if status is Status.CORRECT:
        reason = f"correct on {len(sizes_out)} sizes ({sum(s.hidden for s in sizes_out)} hidden); " \
                 f"geomean speedup {geomean(speedups):.3f}x vs the expert"
    return GradeResult(
        attempt_id=req.attempt_id, task_id=card.task_id, task_revision=card.revision, grader_version=GRADER_VERSION,
        status=status, reason_code=code, reason=reason, reward=reward(status, speedups), seed=req.seed,
        profile=profile, device=device_name, fingerprint_id=fingerprint_id, fingerprint=fingerprint,
        sizes=sizes_out, speedup_geomean=geomean(speedups) if status is Status.CORRECT else None,
        measured_speedup_geomean=geomean(measured), tolerances=_tolerances(card), phase_seconds=phases,
        sandbox=sandbox_layers, sharing=req.sharing, kernels_launched=sorted(set(kernels))[:200],
    )


def _grade_size(req, task: SealedTask, conn, slot, clock: DeviceClock, size, hidden, effort: Effort, rng, remaining,
                phases, first_call, gpu_lock, device_name, kernels) -> tuple[SizeResult, float | None]:
    card = task.card
    specs = resolve_specs(card, size)
    out_shape = resolve_shape(card.output_shape, size)
    elem = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}[card.output_dtype]
    out_nbytes = elem * _prod(out_shape)
    atol, rtol = card.tolerance()
    key = size_key(size)
    worst = 0.0

    def cand_call(seed: int, keep_inputs: bool, profile: bool = False) -> dict:
        msg = {"op": "call", "specs": specs, "seed": seed, "out_nbytes": out_nbytes, "keep_inputs": keep_inputs,
               "profile": profile}
        reply, _, parent_ms = _request(conn, msg, remaining)
        _check_guards(conn, reply, slot)
        if not reply.get("ok"):
            if reply.get("error_kind") == "oom":
                raise Floor(Status.RUNTIME_ERROR, Reason.OOM, _tail(reply.get("error", "")))
            if reply.get("error_kind") == "compile":  # Triton compiles at the first launch
                raise Floor(Status.COMPILE_ERROR, Reason.COMPILE, _tail(reply.get("error", "")))
            raise Floor(Status.RUNTIME_ERROR, Reason.EXCEPTION, _tail(reply.get("error", "")))
        reply["parent_ms"] = parent_ms
        if reply["ms"] > reply["span_ms"] + 0.05 or reply["span_ms"] > parent_ms + 0.05:
            raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED,
                        f"worker clock inconsistent: call {reply['ms']:.3f} ms, span {reply['span_ms']:.3f} ms, "
                        f"parent saw {parent_ms:.3f} ms")
        bad = check_output_meta(reply["meta"], out_shape, card.output_dtype,
                                reply["meta"].get("device", "").split(":")[0] == slot.device.split(":")[0])
        if bad:
            raise Floor(Status.WRONG_OUTPUT, bad.reason_code, bad.detail)
        if reply.get("foreign_stream"):
            raise Floor(Status.CHEAT_FLAGGED, Reason.TIMING_ESCAPED,
                        f"launched {', '.join(reply['foreign_stream'][:5])} on a stream other than the caller's: "
                        "work must be ordered on the stream the kernel is called on")
        if reply.get("l2_persisting_bytes"):
            raise Floor(Status.CHEAT_FLAGGED, Reason.L2_PERSISTING,
                        f"reserved {reply['l2_persisting_bytes']} bytes of persisting L2, which survives the cache "
                        "flush between timed calls")
        if req.language == "triton" and not any(k.startswith("candidate:") for k in reply.get("launches", {})):
            raise Floor(Status.CHEAT_FLAGGED, Reason.NO_OWN_KERNEL,
                        "a Triton candidate ran without launching any of its own @triton.jit kernels")
        if reply.get("ops"):
            hit = sorted(set(reply["ops"]) & set(card.forbidden_ops))
            if hit:
                raise Floor(Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP,
                            f"called {', '.join(hit)}, the library op that does the whole task")
        kernels.extend(reply.get("kernels", []) or [k.split(":", 1)[1] for k in reply.get("launches", {})])
        return reply

    def verify(idx: int, seed: int, with_inputs: bool) -> Verdict:
        t_fetch = time.perf_counter()
        reply, _, _ = _request(conn, {"op": "fetch", "idx": idx, "with_inputs": with_inputs}, remaining)
        if not reply.get("ok") or not reply.get("_fd"):
            raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED, f"worker refused to hand over output {idx}")
        try:
            tensors = wire.tensors_from_memfd(reply["tensors"], wire.recv_fd(conn.sock), slot.device)
        except (wire.WireError, OSError, ValueError, TypeError, AttributeError) as e:
            raise Floor(Status.CHEAT_FLAGGED, Reason.BAD_OUTPUT, f"worker sent an unreadable output: {e}") from None
        phases["transfer"] += time.perf_counter() - t_fetch
        t_ref = time.perf_counter()
        inputs = make_inputs(specs, seed, slot.device)
        if with_inputs:
            returned = tensors[1:]
            if len(returned) != len(inputs) or any(not _same(a, b) for a, b in zip(returned, inputs)):
                raise Floor(Status.CHEAT_FLAGGED, Reason.INPUT_MUTATED, f"inputs changed by the call at size {key}")
        wide = upcast(inputs)
        ref = task.ref(*wide)
        verdict = compare(tensors[0], ref, atol, rtol, task.scale(*wide) if task.scale else None)
        phases["reference"] += time.perf_counter() - t_ref
        return verdict

    # -- correctness: fully verified calls (the first one profiled for op names and kernels) --
    t = time.perf_counter()
    for i in range(effort.check_calls):
        seed = derive_seed(req.seed, key, "check", i)
        t_call = time.perf_counter()
        # The first call of every size is profiled: a library fallback taken only at some sizes shows.
        # The attempt's very first call JIT-compiles for seconds of CPU: it runs without the device
        # lock so another slot's timing does not wait on a compiler; at worst it overlaps one of that
        # slot's timed calls, which the median absorbs.
        compiling = first_call and i == 0
        with (contextlib.nullcontext() if compiling else gpu_lock.shared()):
            reply = cand_call(seed, keep_inputs=True, profile=i == 0)
        if compiling:  # charged to compilation
            phases["compile"] += time.perf_counter() - t_call
            t += time.perf_counter() - t_call
        with gpu_lock.shared():
            v = verify(reply["idx"], seed, with_inputs=True)
        worst = max(worst, v.max_rel_err)
        if not v.ok:
            raise Floor(Status.WRONG_OUTPUT, v.reason_code, f"size {'hidden' if hidden else key}: {v.detail}")
    phases["correctness"] += time.perf_counter() - t

    # -- timing: expert and candidate interleaved call by call, exclusive use of the GPU --
    t = time.perf_counter()
    cand_ms, exp_ms, timed = [], [], []
    with gpu_lock.exclusive():
        t_size = time.monotonic()
        r = 0
        while r < effort.max_reps:
            seed = derive_seed(req.seed, key, "time", r)
            te = time.perf_counter()
            e_in = make_inputs(specs, derive_seed(req.seed, key, "expert", r), slot.device)
            clock.sync()
            _, e_ms, _ = clock.time_call(task.expert, e_in)  # flushes L2 first, like the worker's call
            del e_in
            phases["expert"] += time.perf_counter() - te
            reply = cand_call(seed, keep_inputs=False)
            cand_ms.append(reply["ms"])
            exp_ms.append(e_ms)
            timed.append((reply["idx"], seed))
            r += 1
            if r >= effort.min_reps and (ratio_ci(cand_ms, exp_ms) <= effort.target_rel_ci
                                         or time.monotonic() - t_size > effort.size_budget_s):
                break
    phases["timing"] += time.perf_counter() - t
    # -- verify a sample of timed outputs, chosen now that the calls are done --
    t = time.perf_counter()
    n_verify = min(len(timed), max(effort.verify_timed, math.ceil(effort.verify_fraction * len(timed))))
    for idx, seed in rng.sample(timed, n_verify):
        with gpu_lock.shared():
            v = verify(idx, seed, with_inputs=False)
        worst = max(worst, v.max_rel_err)
        if not v.ok:
            raise Floor(Status.WRONG_OUTPUT, Reason.TIMED_OUTPUT_MISMATCH,
                        f"a timed call's output was wrong at size {'hidden' if hidden else key}: {v.detail}")
    phases["correctness"] += time.perf_counter() - t

    c_med, e_med = median(cand_ms), median(exp_ms)
    measured = e_med / c_med if c_med > 0 else float("inf")
    bw = next((v for k, v in BANDWIDTH_BYTES_PER_S.items() if k in device_name), BANDWIDTH_BYTES_PER_S["cpu"])
    floor_ms = bytes_floor(card, size) / bw * 1e3
    if c_med < floor_ms:
        raise Floor(Status.CHEAT_FLAGGED, Reason.BELOW_FLOOR,
                    f"median {c_med * 1e3:.2f} us is below the physical floor {floor_ms * 1e3:.2f} us "
                    f"({bytes_floor(card, size) / 1e6:.1f} MB at {bw / 1e12:.1f} TB/s)")
    return SizeResult(size_key="hidden" if hidden else key, hidden=hidden, cand_ms=c_med, expert_ms=e_med,
                      cand_ms_ci=median_ci(cand_ms), expert_ms_ci=median_ci(exp_ms), reps=len(cand_ms),
                      speedup=clip_speedup(measured), max_rel_err=worst), measured


def _request(conn: WorkerConn, msg: dict, remaining, payload: bytes = b"") -> tuple[dict, bytes, float]:
    return conn.request(msg, remaining(), payload)


def _offer(cache: compile_cache.CompileCache, source: str, env: compile_cache.BuildEnv) -> tuple[list, bytes]:
    try:
        return cache.offer(source, env)
    except OSError:  # an unreadable cache costs a compile, never the grade
        return [], b""


def _ext_record(cache: compile_cache.CompileCache, source: str, env, use: bool, offer: list, reply: dict,
                built: bytes) -> dict:
    """File the worker's new builds under this program's binding; describe what the cache did.

    `filed` is the parent's own count; `served` and `built` are what the worker says it took from the
    offer and compiled (`served` is bounded by the offer, but the candidate's interpreter wrote both)."""
    filed = 0
    if use and reply.get("ext_built"):
        try:
            filed = len(cache.accept(source, env, reply["ext_built"], built))
        except OSError:  # a full or broken cache disk costs the next attempt a compile, never this grade
            filed = 0
    offered = {m.get("material_sha256") for m in offer}
    claimed = reply.get("ext_served") if isinstance(reply.get("ext_served"), list) else []
    return {"served": len({d for d in claimed if isinstance(d, str) and d in offered}),
            "built": len(reply["ext_built"]) if isinstance(reply.get("ext_built"), list) else 0, "filed": filed}


def _check_guards(conn: WorkerConn, reply: dict, slot: Slot) -> None:
    """Checks made from outside the candidate's interpreter after every reply."""
    audit = conn.drain_audit()
    if audit:
        raise _audit_floor(audit[0])
    if reply.get("tampered"):
        raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED,
                    f"replaced grader clocks or hooks: {', '.join(reply['tampered'])}")
    extra_threads = sandbox.thread_count(conn.pid) - conn.baseline_threads
    if extra_threads > 0:
        raise Floor(Status.CHEAT_FLAGGED, Reason.THREADS, f"{extra_threads} thread(s) left running after the call")
    others = [p for p in (sandbox.uid_pids(slot.uid) if slot.uid is not None else sandbox.child_pids(conn.pid))
              if p != conn.pid]
    if others:
        raise Floor(Status.CHEAT_FLAGGED, Reason.THREADS, f"{len(others)} process(es) left running after the call")


def _audit_floor(line: str) -> Floor:
    kind, _, what = line.partition("\t")
    if kind == "threads":
        return Floor(Status.CHEAT_FLAGGED, Reason.THREADS, f"the candidate {what} (work outside the timed call)")
    if kind == "clock":
        return Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED, f"the candidate {what}")
    return Floor(Status.CHEAT_FLAGGED, Reason.SANDBOX_VIOLATION, f"sandbox: {what}")


def _same(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b.to(a.device)))


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _tail(text: str, n: int = 600) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[:1] + lines[-2:])[:n] or "no detail"


def _tolerances(card: TaskCard) -> dict:
    atol, rtol = card.tolerance()
    return {"atol": atol, "rtol": rtol, "dtype": card.output_dtype}
