"""Build an attempt's C++/CUDA extensions ahead of its grade, off the slots, so its grade is served the result.

Why: a CUDA attempt compiles its extension at import, 30-106 s of CPU each on the H200 host, inside the slot that
grades it (H200 run 59: eight CUDA-L1 builds held 566 of round 1's 1,776 slot-seconds, and seven of them failed).
The device waits meanwhile for a slot that is busy with a compiler. Here a few builders, each a confined CPU-only
child (grader.confine: the same sandbox as a worker, no device), import the attempt's module while the slots grade
other attempts. What the import builds, and every build that fails with the compiler's verdict, is filed in the
extension cache under the binding of that exact module text (grader.compile_cache): the grade's worker is offered
it, loads the binary or raises the same verdict, and compiles nothing. Until its build is done the attempt waits
in the queue, not in a slot (`grader.service._Queue`).

Why this gives a candidate nothing: the builder runs the same untrusted import the grade would, in the same kind
of sandbox, with no device and nothing of the grade's (no seeds, no sizes, no inputs). Whatever it reports is filed
under its own program's binding, where only the same program is ever served it; a lie about its own build or its
own failure can only floor that program, which could have done so itself. A module that builds nothing at import,
needs the device to build, or fails otherwise leaves nothing behind, and its grade compiles in its slot as before.
"""
from __future__ import annotations

import base64
import json
import os
import queue
import re
import threading
import time
from typing import Callable

BUILDS = re.compile(r"\b(load_inline|cpp_extension)\b")
"""A module that may build an extension at import names one of torch's loaders."""

BUILD_TIMEOUT_S = 900.0
"""The longest a build ahead may run (an attempt's own budget when shorter)."""

BUILD_NICENESS = 10
"""Added to a builder's niceness with the service's `nice_builds`: in the acceptance's round 1 (H100 runs 110 and
112) 4 builders, each keeping about 2 cores busy with a compiler, took 386-420 s of the round's 111-123 s, the host's
16 CPUs were busy at a median 56-63% against 40% in a round 1 with fewer builds (run 115), and the same code graded
round 1 in 91 s on a faster host (run 102). A nice builder's compiler takes the cores the workers leave idle; its
attempt waits in the queue, not in a slot, until it is done."""

MAX_REPORT_BYTES = 360 << 20
"""Largest report a builder may print (its binaries, base64; `compile_cache.MAX_ENTRY_BYTES` is 256 MiB): a builder
that prints more is killed (`run_confined`'s cap), and nothing of it is filed."""

_BUILDER = r'''
import base64, json, os, sys, time, types
from grader.compile_cache import ExtensionHook

job = json.loads(sys.stdin.buffer.read())
t0 = time.perf_counter()
hook = ExtensionHook(os.getcwd(), job["offer"], base64.b64decode(job["offered"]))
if job.get("fail_fast"):  # a failed command ends the build at once (grader.ninjastop)
    from grader.ninjastop import install
    install(os.getcwd())
path = os.path.join(os.getcwd(), "candidate.py")
with open(path, "w") as f:
    f.write(job["source"])
error = None
import torch

# Many modules build only where they see a device (`if torch.cuda.is_available(): load_inline(...)`, in CUDA-L1 at
# import or in the model's constructor): the builder has none, so it says there is one. Only what is built counts
# here, filed for this program alone; what the import does after that (reaching for the device) fails harmlessly.
torch.cuda.is_available = lambda: True
hook.install()
try:
    module = types.ModuleType("candidate")
    module.__file__ = path
    sys.modules["candidate"] = module
    exec(compile(job["source"], path, "exec"), module.__dict__)
except BaseException as e:  # the grade will see the same: what matters here is what was built before it
    error = f"{type(e).__name__}: {e}"[-1500:]
hook.uninstall()
index, payload = hook.report()
report = {"index": index, "payload": base64.b64encode(payload).decode(), "error": error, "built": len(hook.built),
          "failed": len(hook.failed), "served": len(hook.served), "replayed": len(hook.replayed),
          "compiled": hook.compiled[:3],
          "s": time.perf_counter() - t0}
sys.stdout.write("\n" + json.dumps(report))  # a line of its own after the module's prints, which may not end one
sys.stdout.flush()
os._exit(0)
'''


def wants_build(source: str, language: str, device: str) -> bool:
    """Whether an attempt's module may build an extension at import, and could be graded here at all (a CUDA attempt
    on a CPU grader is floored before it loads)."""
    return not (language == "cuda" and not device.startswith("cuda")) and bool(BUILDS.search(source))


def arch_list(device: str) -> str | None:
    """The TORCH_CUDA_ARCH_LIST torch picks for a visible device when none is set (`_get_cuda_arch_flags`): its
    capability clamped to the newest this torch was built for, with PTX. A builder sees no device, so the grader
    sets this for builders and workers alike: both compile the same flags, and the binary serves the grade."""
    if not device.startswith("cuda"):
        return None
    import torch

    cap = torch.cuda.get_device_capability(torch.device(device))
    built = [int("".join(re.findall(r"\d+", a.split("_")[1]))) for a in torch.cuda.get_arch_list() if "sm_" in a]
    if built:
        cap = min(max((sm // 10, sm % 10) for sm in built), cap)
    return f"{cap[0]}.{cap[1]}+PTX"


def build(source: str, cache, env, timeout_s: float, *, hide_extra: list[str] = (), address_space_mb: int | None = 16384,
          arch: str | None = None, nice: int = 0, fail_fast: bool = False) -> dict:
    """Import `source` in a confined builder and file what it built and what failed conclusively; the record of it
    (`s`, what the builder reported, what the parent `filed`, and how it ended). The builder is offered what the cache
    holds for the program already (an earlier round's build or failure), and compiles only what it lacks. `arch`: the
    TORCH_CUDA_ARCH_LIST the grade's workers build with (`arch_list`). `nice`: the builder's niceness, added to this
    process's (`BUILD_NICENESS` with the service's `nice_builds`). `fail_fast`: the build ends at its first failed
    command, not after the others (`grader.ninjastop`, the service's `fail_fast_builds`)."""
    from grader.compile_cache import summaries
    from grader.confine import run_confined

    t0 = time.perf_counter()
    try:
        index, payload = cache.offer(source, env)
    except OSError:
        index, payload = [], b""
    job = {"source": source, "offer": index, "offered": base64.b64encode(payload).decode(), "fail_fast": fail_fast}
    done = run_confined(_BUILDER, json.dumps(job).encode(), timeout_s, memory_mb=address_space_mb,
                        fsize_mb=65536, nproc=512, tmp_mb=1024, hide_extra=list(hide_extra),
                        preload=["grader.compile_cache", "grader.ninjastop"], output_cap=MAX_REPORT_BYTES,
                        env_extra={"TORCH_CUDA_ARCH_LIST": arch} if arch else None, nice=nice)
    record: dict = {"s": round(time.perf_counter() - t0, 2)}
    if done.timed_out or done.overflowed:
        return {**record, "outcome": f"timed out after {timeout_s:.0f} s" if done.timed_out
                else f"killed: it printed more than {MAX_REPORT_BYTES >> 20} MiB"}
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else b""
    try:
        report = json.loads(line)
        index, payload = report["index"], base64.b64decode(report["payload"], validate=True)
    except (ValueError, KeyError, TypeError) as e:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        return {**record, "outcome": f"no report (exit {done.returncode}: {type(e).__name__}) {tail[0][:300]}"}
    try:
        filed = cache.accept(source, env, index, payload)
    except OSError as e:  # a full or broken cache disk: the grade compiles as before
        return {**record, "outcome": f"not filed: {e}"}
    builds = sum(not e.failure for e in filed)
    record.update(built=builds, failed=len(filed) - builds)
    cached = sum(int(report.get(k) or 0) for k in ("served", "replayed"))  # the builder's word: a record only
    record["outcome"] = ("built" if builds and len(filed) == builds else "failed" if not builds and filed
                         else "built and failed" if filed else "in the cache already" if cached else "nothing filed")
    if compiled := summaries(report.get("compiled")):
        record["compiled"] = compiled
    if report.get("error") and not filed:
        record["import_error"] = str(report["error"])[-300:]
    return record


class Builders:
    """A pool of `n` builder threads, each running one confined build at a time, in the order submitted."""

    def __init__(self, n: int, cache, env, on_done: Callable[[object, dict], None], *, hide_extra: list[str] = (),
                 address_space_mb: int | None = 16384, arch: str | None = None, nice: int = 0,
                 fail_fast: bool = False):
        self._jobs: queue.Queue = queue.Queue()
        self._fail_fast = fail_fast
        self._cache, self._env, self._on_done = cache, env, on_done
        self._hide, self._as_mb, self._arch, self._nice = list(hide_extra), address_space_mb, arch, nice
        self._threads = [threading.Thread(target=self._run, name=f"builder-{i}", daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, key: object, source: str, timeout_s: float) -> None:
        self._jobs.put((key, source, min(timeout_s, BUILD_TIMEOUT_S), time.perf_counter()))

    def close(self) -> None:
        """No more builds after the ones running (which are not waited for: a grade that ended early leaves them to
        their timeouts, and `confine` kills what each leaves)."""
        for _ in self._threads:
            self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            key, source, timeout_s, t_queued = job
            waited = time.perf_counter() - t_queued
            try:
                record = build(source, self._cache, self._env, timeout_s, hide_extra=self._hide,
                               address_space_mb=self._as_mb, arch=self._arch, nice=self._nice,
                               fail_fast=self._fail_fast)
            except Exception as e:  # noqa: BLE001 - a builder's failure costs the grade a compile, never the grade
                record = {"outcome": f"builder error: {type(e).__name__}: {e}"[:300]}
            self._on_done(key, {**record, "queued_s": round(waited, 2)})


def default_builders(device: str) -> int:
    """Builders for a service on `device` when none is asked for: a quarter of the host's cores on a GPU host (a
    build keeps about two busy: ninja compiles the C++ and CUDA objects side by side), none on a CPU grader, whose
    cores time the candidates."""
    return max(1, (os.cpu_count() or 4) // 4) if device.startswith("cuda") else 0
