"""Which launches wait for the device behind a closed launch gate: one table, each case in a fresh process.

    python bench/gate_stall_probe.py [--patience-s 2.0] [--cases alloc_new,triton_new] [--loading lazy,eager]

A gated call's launch runs behind its worker's closed gate (`grader.timing.StreamGate`, a `cuStreamWaitValue32` on the
stream the candidate launches on). A launch that waits for the device there cannot return until the parent opens the
gate, which it does after `session.CHECK_PATIENCE_S` (a size's first check call) and then holds a window for what is
left. H100 run 130 (2026-12-07): 233 of 491 sizes' first check calls were let through so (68 ms a window), and 36 of
698 later ones. This probe asks which of a first call's usual steps waits: a fresh allocation, a kernel built into
torch's library that the process never launched (CUDA's lazy loading may synchronise the context to load one), a kernel
torch JIT-compiles at its first call (erfcx, through NVRTC), a Triton kernel specialised anew (its compile and load),
each against the same step done once before, and a synchronising read as the control that must wait. Each case runs
once with the driver's lazy module loading and once with eager (`CUDA_MODULE_LOADING`).

A case's row: whether its launch returned behind the closed gate within the patience, how long the launch took, how
long until its work was done once the gate opened, and, for a launch still blocked at the patience, its thread's CPU
time over the wait as a share of it (a wait that spins reads near 1, one that sleeps near 0: whether the worker could
tell a launch waiting for the device from one compiling).

H100 run 131 (2026-12-07, `docs/measurements/2026-12-07-h100-run131/`, the first version, whose torch case was the JIT
one): fresh and cached allocations returned behind the gate (1.1 and 0.5 ms); a new Triton specialisation and the
JIT-compiled kernel did not, with lazy loading or eager (blocked until the opening, then done in 0.5-0.7 ms; lazy, the
JIT kernel's first call took 4.7 s more after it); kernels launched before returned at once. A blocked launch's thread
spun (CPU share 0.99-1.0), as the synchronising read's did: the CPU share cannot tell it from a compile. So a size's
first call stalls where its process loads a module for the first time, which a Triton kernel specialised on the size
always does; no allocation does. H100 run 134 ran this version: a kernel of torch's own library waits as well with
lazy loading (torch's default), and returns behind the gate with eager loading. On the CPU it says it needs CUDA and
exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOADING = ("lazy", "eager")
MIB = 1 << 20
CHILD_TIMEOUT_S = 40.0
"""A case's process past this is reported as never ending, and the next case runs."""


try:  # a kernel of this file's own, so Triton can read its source; none where Triton is missing
    import triton
    import triton.language as tl

    @triton.jit
    def _add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)
except ImportError:
    _add_one = None


def _add(x, block: int) -> None:
    """`x += 1` by the Triton kernel specialised on `block` (compiled and loaded at its first launch)."""
    _add_one[((x.numel() + block - 1) // block,)](x, x.numel(), BLOCK=block)


def _cases(torch) -> dict:
    """name -> (setup, launch): `setup` runs with the gate open and the device synchronised after it; `launch` runs
    on a thread of its own behind the closed gate, as a candidate's call does."""
    dev = "cuda"
    state: dict = {}

    def alloc_new_setup():
        torch.cuda.empty_cache()

    def alloc_cached_setup():  # allocated and freed at once: the allocator keeps the block
        torch.empty(256 * MIB, dtype=torch.uint8, device=dev)

    def alloc():
        state["keep"] = torch.empty(256 * MIB, dtype=torch.uint8, device=dev)

    def x_setup(kernel=None):  # the output is allocated here: the launch below allocates nothing; `kernel` run once
        def setup():
            state["x"], state["y"] = torch.randn(MIB, device=dev), torch.empty(MIB, device=dev)
            if kernel is not None:
                kernel()
        return setup

    def jit_kernel():  # torch JIT-compiles erfcx at its first call (NVRTC, its "jiterator") and loads the module
        torch.special.erfcx(state["x"], out=state["y"])

    def library_kernel():  # a kernel built into torch's library that nothing else here launches: lazily loaded
        torch.tanh(state["x"], out=state["y"])

    def triton_setup(used: bool):
        def setup():
            state["x"] = torch.zeros(MIB, device=dev)
            _add(state["x"], 256)
            if used:
                _add(state["x"], 512)
        return setup

    return {
        "alloc_new": (alloc_new_setup, alloc),
        "alloc_cached": (alloc_cached_setup, alloc),
        "torch_library_new": (x_setup(), library_kernel),
        "torch_library_used": (x_setup(library_kernel), library_kernel),
        "torch_jit_new": (x_setup(), jit_kernel),
        "torch_jit_used": (x_setup(jit_kernel), jit_kernel),
        "triton_new": (triton_setup(False), lambda: _add(state["x"], 512)),
        "triton_used": (triton_setup(True), lambda: _add(state["x"], 512)),
        "sync_read": (x_setup(), lambda: float(state["x"].sum())),
    }


def probe(case: str, patience_s: float) -> dict:
    """One case in this process: gate armed on the current stream (as a worker's clock does), `setup` untimed, then
    `launch` behind the closed gate; the gate opens once it returned or the patience ran out."""
    import torch

    from grader import wire
    from grader.timing import StreamGate

    word = wire.GateWord()
    gate = StreamGate(torch.cuda.current_stream().cuda_stream)
    armed = gate.arm(os.dup(word.fd))
    if armed != "on":
        return {"case": case, "error": f"the gate is {armed}"}
    setup, launch = _cases(torch)[case]
    setup()
    torch.cuda.synchronize()
    returned, failed, clocks = threading.Event(), [], []

    def run():
        clocks.append(time.pthread_getcpuclockid(threading.get_ident()))  # its own: it may end before anyone asks
        try:
            launch()
        except BaseException as e:  # reported in the row
            failed.append(f"{type(e).__name__}: {e}"[:200])
        returned.set()

    gate.close()
    t0 = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    behind = returned.wait(patience_s)
    t_launch = time.perf_counter()
    # the launching thread's CPU time over the wait: a launch blocked on the device spins (near 1) or sleeps (near 0)
    try:
        cpu_share = None if returned.is_set() else time.clock_gettime(clocks[0]) / max(t_launch - t0, 1e-9)
    except OSError:  # it ended meanwhile
        cpu_share = None
    word.open()
    returned.wait()
    t_returned = time.perf_counter()
    torch.cuda.synchronize()
    t_done = time.perf_counter()
    thread.join()
    return {"case": case, "returned_behind_gate": behind, "launch_ms": round((t_returned - t0) * 1e3, 2),
            "after_open_ms": round((t_done - t_launch) * 1e3, 2),
            "blocked_cpu_share": None if cpu_share is None else round(cpu_share, 3),
            "error": failed[0] if failed else ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patience-s", type=float, default=2.0)
    ap.add_argument("--cases", default="", help="comma-separated; default: every case")
    ap.add_argument("--loading", default=",".join(LOADING))
    ap.add_argument("--one", default="", help=argparse.SUPPRESS)  # a child's case
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(probe(args.one, args.patience_s)), flush=True)
        return 0
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print("gate_stall_probe: needs a CUDA device (the launch gate is a CUDA stream wait); nothing probed")
        return 0
    known = list(_cases(torch))
    names = [c for c in args.cases.split(",") if c] or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {', '.join(known)}")
    print("case\tloading\treturned behind the closed gate\tlaunch ms\tdone after the opening ms\t"
          "launching thread's CPU share while blocked\terror")
    for loading in [m for m in args.loading.split(",") if m]:
        for name in names:
            env = {**os.environ, "CUDA_MODULE_LOADING": loading.upper()}
            try:
                out = subprocess.run([sys.executable, __file__, "--one", name, "--patience-s", str(args.patience_s)],
                                     env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S + args.patience_s)
            except subprocess.TimeoutExpired:
                row = {"error": f"no answer in {CHILD_TIMEOUT_S + args.patience_s:.0f} s (its work never ended)"}
            else:
                lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
                row = json.loads(lines[-1]) if lines else \
                    {"error": f"rc {out.returncode}: {out.stderr.strip()[-200:]}"}
            print(f"{name}\t{loading}\t{row.get('returned_behind_gate', '-')}\t{row.get('launch_ms', '-')}\t"
                  f"{row.get('after_open_ms', '-')}\t{row.get('blocked_cpu_share', '-')}\t{row.get('error', '')}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
