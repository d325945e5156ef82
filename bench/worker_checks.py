"""What a worker's checks after each request cost on this machine, part by part.

    python bench/worker_checks.py [--device auto|cpu|cuda] [--n 300]

Every reply of a worker carries two checks made after its request (grader/worker.py `Worker.serve`): the integrity
check of the worker's own objects (`make_integrity_check` over its owners) and the interpreter's check
(`Worker._state`), whose parts `make_state_checks` makes: torch's types' attributes, the signal handlers, the
dispatcher's kernels for the worker's own ops and the modules it imports by name. On an H100 the acceptance's
timed calls spent 6.8 ms (candidate) and 3.3 ms (twin) of their 25 and 22 ms round trips in that check (run 116);
this script says which part it is, on the host it runs on, in a worker built in this process exactly as a grading
worker builds itself (its own CUDA context on a GPU; no sandbox, no candidate). Prints one table: each part's
median, p90 and share of the whole, over `--n` calls after one untimed.
"""
from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _times_ms(fn, n: int) -> list[float]:
    fn()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def measure(device: str, n: int) -> list[tuple[str, list[float]]]:
    """(part, its times in ms) for each part of the checks and their whole, in a worker built for `device`."""
    import torch

    from grader import worker

    ours, theirs = socket.socketpair()
    try:
        w = worker.Worker(ours, device)
        parts = list(worker.make_state_checks(torch).items())
        integrity = worker.make_integrity_check(w._owners, strict=[w, w.clock])
        rows = [(f"interpreter: {name}", _times_ms(check, n)) for name, check in parts]
        rows.append(("interpreter, whole (Worker._state)", _times_ms(w._state, n)))
        rows.append(("integrity of the worker's objects", _times_ms(integrity, n)))
        return rows
    finally:
        ours.close()
        theirs.close()


def table(rows: list[tuple[str, list[float]]]) -> str:
    whole = statistics.median(next(t for name, t in rows if name.startswith("interpreter, whole")))
    lines = ["part\tmedian ms\tp90 ms\tshare of the interpreter's check"]
    for name, times in rows:
        med, p90 = statistics.median(times), sorted(times)[int(0.9 * (len(times) - 1))]
        share = f"{med / whole:.0%}" if name.startswith("interpreter: ") and whole > 0 else ""
        lines.append(f"{name}\t{med:.3f}\t{p90:.3f}\t{share}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="auto (cuda when torch sees one), cpu or cuda")
    ap.add_argument("--n", type=int, default=300, help="timed calls of each part")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("--n must be at least 1")
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} device {device}, torch {torch.__version__}, "
          f"{args.n} calls a part")
    print(table(measure(device, args.n)))


if __name__ == "__main__":
    main()
