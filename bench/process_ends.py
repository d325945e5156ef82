"""What a grading process costs to start and to end: the zygote, and a process with the zygote's imports.

    python bench/process_ends.py [--repeats 3]

Rows, each the median of --repeats runs (CPU seconds are the child's user + system time):
- `zygote start`: a real zygote (grader/zygote.py), from launch to its `ready` (its pre-imports);
- `zygote end`: from its `bye` to its exit, as every slot's close waits for it (the zygote leaves with
  `os._exit`);
- `teardown, normal exit`: a process that makes the zygote's imports, then exits as Python does by default;
- `teardown, os._exit`: the same process, ending with `os._exit`.
The last two, side by side, are what every zygote, fresh worker, confined probe and replay grader process
saves by leaving with `os._exit` (ratio printed). Run it on an idle machine: it measures wall time too.
"""
from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import zygote  # noqa: E402

IMPORTS = "import torch, triton, triton.language, torch.profiler, torch._dynamo, torch._inductor\n"
MARK = "import sys; sys.stdout.write('imported\\n'); sys.stdout.flush(); sys.stdin.readline()\n"


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def zygote_start_and_end() -> tuple[float, float]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "grader.zygote", str(theirs.fileno())], pass_fds=[theirs.fileno()],
                            env=env, cwd="/")
    theirs.close()
    zygote.ctl_send(ours, {"device": "cpu"})
    reply = zygote.ctl_recv(ours)
    if not reply.get("ready"):
        raise SystemExit(f"the zygote did not start: {reply}")
    started = time.perf_counter() - t
    t = time.perf_counter()
    zygote.ctl_send(ours, {"op": "bye"})
    proc.wait()
    return started, time.perf_counter() - t


def teardown(ending: str) -> tuple[float, float]:
    """(wall, CPU) seconds from the moment the imports are done to the process's end."""
    code = IMPORTS + MARK + ("import os; os._exit(0)\n" if ending == "os._exit" else "")
    before = _child_cpu()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()  # imports done
    t = time.perf_counter()
    proc.stdin.write("\n")
    proc.stdin.flush()
    proc.wait()
    wall = time.perf_counter() - t
    return wall, _child_cpu() - before  # CPU of the whole child: imports included, the same in both rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    starts, ends = zip(*(zygote_start_and_end() for _ in range(args.repeats)))
    normal = [teardown("normal") for _ in range(args.repeats)]
    quick = [teardown("os._exit") for _ in range(args.repeats)]
    med = statistics.median
    rows = [("zygote start (launch to ready)", med(starts), None),
            ("zygote end (bye to exit)", med(ends), None),
            ("teardown, normal exit", med(w for w, _ in normal), med(c for _, c in normal)),
            ("teardown, os._exit", med(w for w, _ in quick), med(c for _, c in quick))]
    print(f"{'what':34s} {'wall s':>8s} {'child CPU s (whole process)':>28s}")
    for name, wall, cpu in rows:
        print(f"{name:34s} {wall:8.2f} {'' if cpu is None else f'{cpu:.2f}':>28s}")
    n_wall, q_wall = rows[2][1], rows[3][1]
    print(f"ending with os._exit: {n_wall - q_wall:.2f} s less wall per process "
          f"({n_wall / max(q_wall, 1e-3):.0f}x shorter end), {rows[2][2] - rows[3][2]:.2f} s less CPU; "
          f"median of {args.repeats}, {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
