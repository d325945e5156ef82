"""A worker's first Triton kernel, its Triton cache empty and with Triton's host module planted (grader.tritonseed).

    python bench/triton_seed.py [--pairs 6] [--out DIR]

Each try is a fresh interpreter in a worker's scrubbed environment (`launcher.base_env`), as a worker is after its
start: torch, triton and CUDA started, then the clock: the first launch of a small kernel (Triton compiles it, and
with an empty cache builds its host module first), then a second kernel's first launch. The tries alternate, empty
then seeded, with a fresh cache folder each. Prints a table (ms, medians and spread) and the ratio; with `--out`,
writes it there as well. Needs a CUDA device.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROGRAM = r'''
import json, time
import torch
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)


@triton.jit
def shift(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=i < n) + 1, mask=i < n)


x = torch.ones(4096, device="cuda")
y = torch.empty_like(x)
torch.cuda.synchronize()
t0 = time.perf_counter()
scale[(4,)](x, 4096, BLOCK=1024)
torch.cuda.synchronize()
t1 = time.perf_counter()
shift[(4,)](x, y, 4096, BLOCK=1024)
torch.cuda.synchronize()
t2 = time.perf_counter()
assert float(y.sum()) == 3 * 4096
print(json.dumps({"first_ms": (t1 - t0) * 1e3, "second_ms": (t2 - t1) * 1e3}))
'''


def one_try(program: Path, env: dict, seed: dict[str, bytes] | None) -> dict:
    from grader import tritonseed

    with tempfile.TemporaryDirectory(prefix="kt-seed-bench-") as cache:
        if seed:
            tritonseed.plant(seed, cache)
        done = subprocess.run([sys.executable, str(program)], env=dict(env, TRITON_CACHE_DIR=cache, HOME=cache),
                              capture_output=True, timeout=300, cwd="/")
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode("utf-8", "replace")[-800:])
        return json.loads(done.stdout.decode().strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from grader import tritonseed
    from grader.launcher import base_env

    env = base_env("cuda")
    t0 = time.perf_counter()
    seed, record = tritonseed.build(env)
    lines = [f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; the seed: {json.dumps(record)} "
             f"({time.perf_counter() - t0:.1f} s)"]
    print(lines[0], flush=True)
    if not seed:
        raise SystemExit("no seed was built: " + json.dumps(record))
    rows: dict[str, list[dict]] = {"empty cache": [], "seeded": []}
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "first_kernel.py"
        program.write_text(PROGRAM)
        for i in range(args.pairs):
            for name, s in (("empty cache", None), ("seeded", seed)):
                got = one_try(program, env, s)
                rows[name].append(got)
                print(f"  try {i + 1} {name}: first {got['first_ms']:.1f} ms, second {got['second_ms']:.1f} ms",
                      flush=True)
    lines.append("cache\ttries\tfirst kernel ms median (min-max)\tsecond kernel ms median (min-max)")
    for name, got in rows.items():
        f, s = [g["first_ms"] for g in got], [g["second_ms"] for g in got]
        lines.append(f"{name}\t{len(got)}\t{statistics.median(f):.1f} ({min(f):.1f}-{max(f):.1f})\t"
                     f"{statistics.median(s):.1f} ({min(s):.1f}-{max(s):.1f})")
    empty = statistics.median(g["first_ms"] for g in rows["empty cache"])
    seeded = statistics.median(g["first_ms"] for g in rows["seeded"])
    lines.append(f"first kernel, empty / seeded: {empty / seeded:.2f}x ({empty - seeded:.0f} ms saved a worker)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "triton_seed.txt").write_text(text + "\n")


if __name__ == "__main__":
    main()
