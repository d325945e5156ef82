"""How long a worker's CUDA start takes when several processes start CUDA at once, and beside what other driver
work, on the device.

    python bench/cuda_start.py [--counts 1,4,8,12,16] [--repeats 2] [--loads none,exits,free,pin,kernels]
                               [--load-procs 4] [--load-counts 8]

H200 runs 82 and 83 started 151 workers in a 120 s round with 12 slots, each CUDA start 3.5-4.5 s at the mean,
against 1.0-1.6 s with 6 slots (H100 run 75). This asks the device alone: a parent that has imported torch, as the
zygote has, forks N children at once; each starts CUDA as a worker's boot does (`torch.cuda.init()`,
`set_device(0)`), then makes its first allocation and its first kernel, and says when each was done; then it exits,
and the parent times its end (its context torn down) to the reap. The first table gives, per N, each part's median
and the slowest child's whole start, the wall time of all N starts, and that wall divided by N: if CUDA's start is
one queue, the last column stays flat as N grows; if it runs in parallel, it falls as 1/N (H100 run 84: flat at
0.14-0.19 s).

The second table starts `--load-counts` children beside `--load-procs` processes doing one kind of the grader's
other driver work (each with CUDA started before the starts begin), to tell which of them shares that queue:
`exits` (each ends its process, its context torn down, as a worker's end does), `free` (1 GiB allocated and its
cached memory given back, over and over, as a reference worker's trim does), `pin` (256 MiB of host memory
page-locked and released, as an arena's lending does), `kernels` (the device kept busy, as a timed call or a check
call does), against `none`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time

LOADS = ("none", "exits", "free", "pin", "kernels")


def child(w: int, go_r: int) -> None:
    os.read(go_r, 1)  # every child starts at once
    try:
        import torch

        t = [time.perf_counter()]
        torch.cuda.init()
        t.append(time.perf_counter())
        torch.cuda.set_device(0)
        t.append(time.perf_counter())
        x = torch.empty(1 << 20, device="cuda")
        t.append(time.perf_counter())
        x.fill_(1.0)
        torch.cuda.synchronize()
        t.append(time.perf_counter())
        line = {"parts": [b - a for a, b in zip(t, t[1:])], "end": t[-1]}
    except BaseException as e:  # noqa: BLE001 - said, not raised: the parent prints it
        line = {"error": repr(e)[:300]}
    os.write(w, (json.dumps(line) + "\n").encode())
    os._exit(0)


def loader(kind: str, ready_w: int, go_r: int) -> None:
    """One process of background driver work: CUDA started, ready said, then `kind` from the go until killed (or,
    for `exits`, its own end at the go)."""
    import torch

    torch.cuda.init()
    torch.cuda.set_device(0)
    torch.empty(1, device="cuda").fill_(0)
    torch.cuda.synchronize()
    os.write(ready_w, b"r")
    os.close(ready_w)  # so a loader that dies before its "ready" leaves the parent an end of file, not a wait
    os.read(go_r, 1)
    if kind == "exits":
        os._exit(0)
    if kind == "kernels":
        a = torch.empty(4096, 4096, device="cuda")
        while True:
            a = a @ a
            torch.cuda.synchronize()
    if kind == "free":
        while True:
            torch.empty(1 << 28, device="cuda").fill_(0)  # 1 GiB of float32
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    if kind == "pin":
        cudart = torch.cuda.cudart()
        buf = torch.empty(256 << 20, dtype=torch.uint8)
        while True:
            cudart.cudaHostRegister(buf.data_ptr(), buf.numel(), 1)
            cudart.cudaHostUnregister(buf.data_ptr())
    while True:  # none
        time.sleep(1)


def forked(n: int, run) -> list[int]:
    """`n` children, each running `run()` and then ending (never returning into the parent's code)."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            try:
                run()
            finally:
                os._exit(1)
        pids.append(pid)
    return pids


def start_load(kind: str, procs: int) -> tuple[list[int], int]:
    """`procs` loaders of `kind`, each with CUDA started; returns their pids and the pipe whose bytes set them off."""
    if kind == "none":
        return [], -1
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = forked(procs, lambda: loader(kind, ready_w, go_r))
    os.close(ready_w)  # the loaders' ends only: each that dies before its "ready" closes its own
    got = b"".join(os.read(ready_r, 1) for _ in range(procs))
    os.close(ready_r)
    os.close(go_r)
    if len(got) < procs:
        stop_load(pids, go_w)
        raise RuntimeError(f"{procs - len(got)} of {procs} {kind!r} loaders failed to start CUDA")
    return pids, go_w


def stop_load(pids: list[int], go_w: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    if go_w >= 0:
        os.close(go_w)


def one_round(n: int, load: str = "none", procs: int = 0) -> dict:
    pids_load, load_go = start_load(load, procs)
    go_r, go_w = os.pipe()
    rd, wr = os.pipe()
    pids = forked(n, lambda: (os.close(rd), child(wr, go_r)))
    os.close(wr)
    time.sleep(0.2)
    if load_go >= 0:
        os.write(load_go, b"x" * procs)
    t0 = time.perf_counter()
    os.write(go_w, b"x" * n)
    rows = []
    with os.fdopen(rd, "rb") as f:
        for line in f:
            rows.append(json.loads(line))
    ends = []
    for pid in pids:
        os.waitpid(pid, 0)
        ends.append(time.perf_counter())
    stop_load(pids_load, load_go)
    done = [r["end"] for r in rows if "end" in r]
    wall = max(done) - t0 if done else float("nan")
    reaped = max(ends) - max(done) if done else float("nan")
    os.close(go_r)
    os.close(go_w)
    return {"n": n, "rows": rows, "wall": wall, "reaped": reaped}


NAMES = ("init", "set_device", "first alloc", "first kernel")


def row_line(label: str, r: dict) -> str:
    failed = [row["error"] for row in r["rows"] if "error" in row]
    rows = [row for row in r["rows"] if "error" not in row]
    if failed or not rows:
        return f"{label}\t{len(failed)} of {r['n']} failed: {failed[:1]}"
    parts = [statistics.median(row["parts"][i] for row in rows) for i in range(len(NAMES))]
    whole = [sum(row["parts"]) for row in rows]
    return (f"{label}\t" + "\t".join(f"{p:.3f}" for p in parts)
            + f"\t{statistics.median(whole):.3f} / {max(whole):.3f}\t{r['wall']:.3f}\t{r['wall'] / r['n']:.3f}"
            f"\t{r['reaped']:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", default="1,4,8,12,16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loads", default="", help=f"comma-separated, of {', '.join(LOADS)} (default: none run)")
    ap.add_argument("--load-procs", type=int, default=4)
    ap.add_argument("--load-counts", type=int, default=8)
    args = ap.parse_args(argv)
    loads = [x for x in args.loads.split(",") if x]
    if set(loads) - set(LOADS):
        ap.error(f"--loads: unknown {sorted(set(loads) - set(LOADS))}")
    if not os.path.exists("/dev/nvidiactl"):  # asking torch would start CUDA here, before the forks
        print("no CUDA device: nothing to measure")
        return 0
    import torch  # noqa: F401 - imported before the forks, as the zygote does; CUDA not started here

    head = ("\t" + "\t".join(f"{p} median (s)" for p in NAMES) + "\twhole start: median / slowest (s)\twall (s)"
            "\twall / N (s)\tlast end to all reaped (s)")
    if args.counts:
        print("N" + head)
        for n in [int(c) for c in args.counts.split(",")]:
            for _ in range(args.repeats):
                print(row_line(str(n), one_round(n)), flush=True)
    if loads:
        print(f"\nbeside {args.load_procs} processes of (N = {args.load_counts})" + head)
        for load in loads:
            for _ in range(args.repeats):
                try:
                    print(row_line(load, one_round(args.load_counts, load, args.load_procs)), flush=True)
                except RuntimeError as e:
                    print(f"{load}\t{e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
