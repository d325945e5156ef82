"""The experts' compiled Triton kernels, built ahead for each built-in task and planted in its kept worker's own cache.

Why: each worker has a Triton cache of its own, empty at its start (`zygote.settle_in`), so a task's kept worker
compiles its expert's kernels at every size it is first called at (a Triton kernel is specialised on its sizes'
block shapes and divisibility), inside the slot: H100 run 125 made 342 such compiling warm-up calls at 301 ms each,
103 s of its 1,840 slot-seconds, and in round 1, where nearly every task is new to its slot, the expert phase took
1.0 s of a correct grade's 9.1 s at the median.

How: a process of its own that runs nothing but the catalogue's code (`python -m grader.expertseed CACHE`, its jobs
on stdin) builds them, each task into an empty cache of its own: the expert is imported from a file in a folder of
its own (`modload.load_source`: Triton keys a kernel on its source text and first line, not on its module's name or
path) and called once at each of the device's sizes on the inputs every side draws (`inputs.make_inputs`); the files
its cache gained (the kernels' groups and their launchers) are the task's, written back as one JSON line on stdout as
soon as the task is done. The service (`GraderService(seed_experts=True)`) runs `BUILDERS` of them as its grading
begins, over the built-in tasks of its queue in the queue's order (`Builds`); a task's worker started after its line
came is given the files (`Slot.task(kernels=...)`, `op: plant` before anything loads), and its expert's first call at
a size finds its kernel in its cache: Triton loads the binary instead of compiling it. A worker started before then compiles
as without them.

Why this gives no one anything: only a built-in card's expert is built (`SealedTask.ours`: its reference and expert
were written here), in a process that runs only that, and only that card's kept worker, which runs only our code, is
given them; a worker of any other role refuses them (`Worker._plant`), so a candidate never sees the expert's code
or kernels. The files are Triton's build of our expert, the bytes the worker would build itself; a Triton whose key
differs (another Triton, compiler or device) finds nothing under its key and compiles, as without them.
"""
from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from grader import tritonseed

BUILDERS = 4
"""Builder processes at once: each boots torch and CUDA (a few seconds) and then compiles one task after another on
one core; the tasks are dealt out in the queue's order, so the first to be graded are built first."""

MAX_FILES = 512
"""The most files one task's kernels may have (a kernel's group is about eight files, at each size it specialises)."""

MAX_BYTES = 64 << 20
"""The most bytes one task's kernels may have."""

TIMEOUT_S = 600.0
"""The longest a builder may run; one still running then is ended, and its tasks compile in their slots."""


def decode(blob: bytes) -> dict[str, bytes]:
    """A task's kernels as `encode` wrote them: plain `<key>/<file>` names only, within this module's limits."""
    return tritonseed.decode(blob, MAX_FILES, MAX_BYTES)


def plant(files: dict[str, bytes], cache_dir: str) -> int:
    """Write a task's kernels into a worker's own Triton cache (`tritonseed.plant`); the number written. A kernel's
    group file (`<key>/__grp__<name>.json`) names its files by absolute path, the builder's (Triton's
    `FileCacheManager.get_group` keeps only those that exist): each is named again in this cache, under the group's
    own key, so the group is found whole here. A child whose name is not a plain file name is left out."""
    out = {}
    for rel, data in files.items():
        key, _, name = rel.partition("/")
        if name.startswith("__grp__"):
            try:
                children = json.loads(data)["child_paths"]
                data = json.dumps({"child_paths": {
                    c: os.path.join(cache_dir, key, os.path.basename(p)) for c, p in children.items()
                    if isinstance(c, str) and isinstance(p, str) and tritonseed.plain_name(f"{key}/{os.path.basename(p)}")
                }}).encode()
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
        out[rel] = data
    return tritonseed.plant(out, cache_dir)


def jobs_for(tasks: list, device: str) -> list[dict]:
    """One job per task (`session.SealedTask`) whose expert the builders may run: a built-in card's (`ours`) whose
    expert launches Triton kernels; its sizes' input specs on this device's profile."""
    from grader.inputs import resolve_specs

    profile = "gpu" if device.startswith("cuda") else "cpu"
    out = []
    for task in tasks:
        card = task.card
        if not task.ours or "triton" not in card.expert:
            continue
        out.append({"task": task.expert_key, "source": card.expert,
                    "sizes": [resolve_specs(card, size) for size, _ in card.sizes(profile)]})
    return out


class Builds:
    """The builders of one service's grading: `start` deals jobs out to up to `BUILDERS` processes, each read on a
    thread of its own; `kernels(key)` is what has come for a task so far (empty until its line came)."""

    def __init__(self, env: dict, device: str, builders: int = BUILDERS, timeout_s: float = TIMEOUT_S):
        self._env, self._device, self._builders, self._timeout_s = env, device, max(1, builders), timeout_s
        self._lock = threading.Lock()
        self._files: dict[str, dict[str, bytes]] = {}
        self.records: dict[str, dict] = {}
        """Task key -> its build's record: seconds, files, bytes, or why there are none."""
        self._asked: set[str] = set()
        self._procs: list[subprocess.Popen] = []
        self._threads: list[threading.Thread] = []
        self._closed = False

    def start(self, jobs: list[dict]) -> int:
        """Build `jobs` not asked for before; the number dealt out."""
        with self._lock:
            jobs = [j for j in jobs if j["task"] not in self._asked]
            self._asked.update(j["task"] for j in jobs)
        if not jobs or self._closed:
            return 0
        n = min(self._builders, len(jobs))
        for i in range(n):
            thread = threading.Thread(target=self._run, args=(jobs[i::n],), name=f"expert-builder{i}", daemon=True)
            self._threads.append(thread)
            thread.start()
        return len(jobs)

    def kernels(self, key: str) -> dict[str, bytes]:
        with self._lock:
            return self._files.get(key, {})

    def _run(self, jobs: list[dict]) -> None:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="kerneltraj-expert-seed-") as root:
            cache, work = os.path.join(root, "cache"), os.path.join(root, "work")
            os.mkdir(cache)
            os.mkdir(work)
            env = dict(self._env, TRITON_CACHE_DIR=cache, HOME=work, TMPDIR=work)
            with open(os.path.join(root, "stderr"), "w+b") as err:
                try:
                    proc = subprocess.Popen([sys.executable, "-m", "grader.expertseed", cache], env=env, cwd=work,
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
                except OSError as e:
                    self._failed(jobs, f"{type(e).__name__}: {e}", t0)
                    return
                with self._lock:
                    self._procs.append(proc)
                timer = threading.Timer(self._timeout_s, proc.kill)
                timer.start()
                try:
                    proc.stdin.write(json.dumps({"device": self._device, "jobs": jobs}).encode())
                    proc.stdin.close()
                    for line in proc.stdout:
                        self._take(line)
                except (OSError, ValueError):
                    pass
                finally:
                    timer.cancel()
                    code = proc.wait()
                err.seek(0)
                tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            left = [j for j in jobs if j["task"] not in self.records]
            if left:
                self._failed(left, f"the builder ended (exit {code}) before it: {tail[0][:300]}", t0)

    def _take(self, line: bytes) -> None:
        """One task's line: its files kept, its record filed."""
        got = json.loads(line)
        key = str(got.get("task"))
        files = decode(got["files"].encode()) if isinstance(got.get("files"), str) else {}
        record = {"s": got.get("s"), "files": len(files), "bytes": sum(map(len, files.values()))}
        if got.get("error"):
            record["error"] = str(got["error"])[:300]
        with self._lock:
            if files:
                self._files[key] = files
            self.records[key] = record

    def _failed(self, jobs: list[dict], why: str, t0: float) -> None:
        with self._lock:
            for j in jobs:
                self.records.setdefault(j["task"], {"s": round(time.perf_counter() - t0, 3), "files": 0,
                                                    "bytes": 0, "error": why})

    def summary(self) -> dict:
        """Tasks built, with kernels, failed; their seconds' median and most; files and bytes in all."""
        with self._lock:
            records = list(self.records.values())
        secs = [r["s"] for r in records if isinstance(r.get("s"), (int, float))]
        errors = sorted({r["error"] for r in records if r.get("error")})
        return {"asked": len(self._asked), "built": len(records), "with_kernels": sum(r["files"] > 0 for r in records),
                "failed": sum(bool(r.get("error")) for r in records), "files": sum(r["files"] for r in records),
                "bytes": sum(r["bytes"] for r in records),
                "s_median": round(statistics.median(secs), 3) if secs else None,
                "s_max": round(max(secs), 3) if secs else None, "errors": errors[:3]}

    def close(self) -> None:
        self._closed = True
        with self._lock:
            procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for thread in self._threads:
            thread.join(timeout=10)


def _build(cache: str, work: str, device: str, jobs: list[dict]) -> None:
    """The builder's side: each job's expert imported from a folder of its own under `work` and called at each size,
    with a Triton cache of its own under `cache` (`TRITON_CACHE_DIR`, which Triton reads as it compiles), so that the
    files a task gets are every one its kernels need, though another task's expert compiled the same kernel before;
    one JSON line a task."""
    import torch

    from grader.inputs import make_inputs
    from grader.modload import load_source

    for i, job in enumerate(jobs):
        t0 = time.perf_counter()
        line: dict = {"task": job["task"]}
        own = os.path.join(cache, f"job{i}")
        try:
            os.makedirs(own, exist_ok=True)  # the cache of a run given kernels planted ahead (its test)
            os.environ["TRITON_CACHE_DIR"] = own
            folder = tempfile.mkdtemp(dir=work, prefix="task-")
            os.chdir(folder)
            fn = load_source(job["source"], f"expert{i}", folder).run  # a module of its own, though sources repeat
            for specs in job["sizes"]:
                fn(*make_inputs(specs, 0, device))
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            # Triton's host module is every worker's already (grader.tritonseed): not sent again with each task
            skip = frozenset(os.path.relpath(p, own) for p in glob.glob(os.path.join(own, "*", "cuda_utils*")))
            files = tritonseed.collect(own, "*", skip=skip, max_files=MAX_FILES, max_bytes=MAX_BYTES)
            line["files"] = tritonseed.encode(files).decode()
        except Exception as e:  # noqa: BLE001 - the task's worker compiles it then, as without a build
            line["error"] = f"{type(e).__name__}: {e}"[:300]
        finally:
            os.environ["TRITON_CACHE_DIR"] = cache
            os.chdir(work)
        line["s"] = round(time.perf_counter() - t0, 3)
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    if os.environ.get("TRITON_CACHE_DIR") != sys.argv[1]:
        raise SystemExit("usage: TRITON_CACHE_DIR=DIR python -m grader.expertseed DIR < jobs.json")
    job = json.loads(sys.stdin.read())
    _build(sys.argv[1], os.getcwd(), job["device"], job["jobs"])
    sys.stdout.flush()
    os._exit(0)
