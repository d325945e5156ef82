"""Triton's own host module, built once per service and planted in every worker's empty Triton cache.

Why: each worker has a Triton cache of its own (`zygote.settle_in`: `TRITON_CACHE_DIR` in its scratch), empty at
its start, so the first Triton kernel a worker launches makes Triton build its CUDA host module (`cuda_utils`, the
C file `driver.c` of Triton's NVIDIA backend, about 1,600 lines) with the host's C compiler: about 0.6 s of `gcc
-O3` on this sandbox's CPUs, in every candidate's worker and every task's, inside the slot, on the attempt's first
check call and on the expert's first warm-up. Triton 3.6 also builds a C launcher for each kernel signature it
meets (`__triton_launcher`). Both depend on Triton, Python, the C compiler and (a launcher) its signature's argument
types, never on an attempt's code or a task's.

So the service (`GraderService(seed_triton=True)`) builds it once, in a process of its own that runs nothing but
Triton's own code (`python -m grader.tritonseed DIR`: Triton's driver on the device, and one kernel of ours, into
an empty cache), and keeps the shared libraries that run left in the cache (`collect`). Each slot's zygote is given
them once (`Slot.seed_triton`) and each worker it forks writes them into its own cache before anything of the
attempt's runs (`plant`): where Triton looks for its module, it finds it, and compiles only the kernels.

Why this gives a candidate nothing: the files are the grader's build of Triton's own source, the same bytes Triton
would build in the worker; each worker gets copies in its own scratch, so what a candidate does to its copies
reaches no other worker. A Triton whose build of its module differs (another key: another C compiler's include
folders, another Triton) finds nothing under its key and builds its own, as without the seed.
"""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MAX_FILES = 16
"""The most files a seed keeps (Triton 3.6 left two on an H200, H200 run 124: `cuda_utils` and the launcher of our
kernel's signature)."""

MAX_BYTES = 16 << 20
"""The most bytes a seed keeps in all."""

BUILD_TIMEOUT_S = 120.0
"""The longest the seed's build may take (Triton's driver, the C compiler, one kernel)."""


def collect(cache_dir: str | Path, pattern: str = "*.so", skip: frozenset[str] = frozenset(),
            max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> dict[str, bytes]:
    """The shared libraries (`*.so`) under a Triton cache, by their path relative to it (`<key>/<file>`): what Triton
    built for its host side. Kernels' binaries are left out: they belong to the kernel that was compiled.
    `pattern` "*": every file (grader.expertseed: an expert's kernels and their launchers), but those in `skip`."""
    root = Path(cache_dir)
    out: dict[str, bytes] = {}
    total = 0
    for path in sorted(root.rglob(pattern)):
        rel = path.relative_to(root).as_posix()
        if rel in skip or not path.is_file() or path.is_symlink() or not plain_name(rel):
            continue
        data = path.read_bytes()
        if len(out) >= max_files or total + len(data) > max_bytes:
            break
        out[rel] = data
        total += len(data)
    return out


def plain_name(rel: str) -> bool:
    """`<key>/<file>`: two plain names, nothing that climbs out of the cache."""
    parts = rel.split("/")
    return len(parts) == 2 and all(p and p not in (".", "..") and "\0" not in p for p in parts)


def encode(files: dict[str, bytes]) -> bytes:
    return json.dumps({rel: base64.b64encode(data).decode() for rel, data in files.items()}).encode()


def decode(blob: bytes, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> dict[str, bytes]:
    """A seed as `encode` wrote it; only plain `<key>/<file>` names, within the limits."""
    raw = json.loads(blob)
    if not isinstance(raw, dict):
        raise ValueError("a Triton seed is a JSON object")
    out: dict[str, bytes] = {}
    for rel, text in list(raw.items())[:max_files]:
        if isinstance(rel, str) and isinstance(text, str) and plain_name(rel):
            out[rel] = base64.b64decode(text)
    if sum(map(len, out.values())) > max_bytes:
        raise ValueError("a Triton seed over its size limit")
    return out


def plant(files: dict[str, bytes], cache_dir: str) -> int:
    """Write the seed's files into a worker's own Triton cache (made if missing); the number written. A file already
    there is left as it is."""
    n = 0
    for rel, data in files.items():
        if not plain_name(rel):
            continue
        target = os.path.join(cache_dir, rel)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        n += 1
    return n


def build(env: dict, timeout_s: float = BUILD_TIMEOUT_S) -> tuple[dict[str, bytes], dict]:
    """Run Triton's driver and one kernel of ours in a process of its own (`env`: a worker's scrubbed environment, so
    Triton finds the compiler and folders a worker finds) into an empty cache; its shared libraries (`collect`), and a
    record: seconds, files, bytes, or why there are none."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kerneltraj-triton-seed-") as cache:
        run_env = dict(env, TRITON_CACHE_DIR=cache, HOME=cache, TMPDIR=cache)
        try:
            done = subprocess.run([sys.executable, "-m", "grader.tritonseed", cache], env=run_env, cwd="/",
                                  capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {}, {"s": round(time.perf_counter() - t0, 3), "error": f"timed out after {timeout_s:.0f} s"}
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
            return {}, {"s": round(time.perf_counter() - t0, 3), "error": f"exit {done.returncode}: {tail[0][:300]}"}
        files = collect(cache)
    return files, {"s": round(time.perf_counter() - t0, 3), "files": sorted(files),
                   "bytes": sum(map(len, files.values()))}


def _warm() -> None:
    """What a worker's first Triton kernel makes Triton build: its driver (`cuda_utils`) and one launch."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)

    x = torch.zeros(64, device="cuda")
    add_one[(1,)](x, 64, BLOCK=64)
    torch.cuda.synchronize()
    if int(x.sum().item()) != 64:
        raise RuntimeError("the seed's kernel computed a wrong sum")


if __name__ == "__main__":
    if os.environ.get("TRITON_CACHE_DIR") != sys.argv[1]:
        raise SystemExit("usage: TRITON_CACHE_DIR=DIR python -m grader.tritonseed DIR")
    _warm()
    sys.stdout.flush()
    os._exit(0)
