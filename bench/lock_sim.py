"""What each piece of device work costs the timing loops, on the CPU: slots of sleeps through the real device lock.

    python bench/lock_sim.py [--slots 12] [--seconds 30] [--scale 1.0] [--variants NAME,...]

Each slot grades sizes one after the other through the real `grader.devicelock.DeviceLock`, as a fully timed grade
of the acceptance mix does; each piece is a sleep (`Shape`):

- per size, the grade's work in no window (start-up, compiling, builds: `host_per_size`);
- 2 check calls, each in a check window, each verified in 4 check windows (fetch, inputs, reference, comparison),
  and the expert's warm-up in one;
- a timing loop: 2 warm-up pairs (each call one draw window, message to reply) and 20 timed pairs, each call a draw
  window (its inputs), its launch behind the closed gate in none, a device window, its reply in none; then 4 timed
  outputs verified in the loop's draw windows (fetch, reference, comparison).

A variant changes some pieces (`VARIANTS`); the table gives, per variant, sizes a second over all slots (and against
the first variant), timed calls a second, a timed call's median round trip, the share of the wall time with some
draw held and with a device window waiting, and the slots' share of time in timing loops.

It is a model, for ranking levers before a device run, not a prediction. On the H200 the holds stretch with
contention (other processes' device work is time-sliced), which sleeps do not: this model's timed call takes 21 ms a
round trip where run 59's took 35, and its draws cover 53% of the wall time where run 59's covered 76%. Sizes come
in steps of a slot's whole size, so two runs of one variant differ by about 10% on a 2-core machine: only larger
differences rank anything. On this project's CPU machine (2026-12-04, 30 s a variant): no check work at all 1.62x;
reference answers 12 ms shorter, or device windows half as long, 1.11x; every other variant within the noise,
a pair's two calls drawn at once included. Again on 2026-12-05 (25 s a variant), for grader 0.18.0: timed calls
drawing behind their gate 1.27x run 59's shape, and every answer kept as well 1.41x, as much as no check work at all
(1.42x); gating the check calls adds nothing more. There the slots spend two thirds of their time outside the loops,
in the 1.5 s of host work per size: the next lever after 0.18.0 is that work (start-up, compiling), or more slots
(`--slots 24`: 1.39x run 59's shape at 24 slots, 6.72 sizes a second against 4.80 at 12). With H200 run 66's check
work (2026-12-05, 20 s a variant): the answer's empty-cache and pool copy out of its window 1.00x, the reference's
answer gated (8 ms a hold) 1.17x, answers and check calls gated 1.33x. This model's draws held 30% of its time where
run 66's held 74%: it does not stretch a hold the way the device's time-slicing between processes does, so it
undervalues every lever on check work.
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.devicelock import DeviceLock  # noqa: E402


@dataclass(frozen=True)
class Shape:
    """Milliseconds of each piece. Check work: H200 run 59's means (measured under contention). A timed call: its
    parts with no other loop about (run 57's first loop: 6.5 ms a round trip, 4.4 of them in the worker)."""

    check_call: float = 72.0
    fetch: float = 14.4
    inputs: float = 2.9
    reference: float = 44.8
    compare: float = 8.5
    warmup_expert: float = 1.5
    whole_call: float = 8.0      # an ungated call of the loop, message to reply (warm-up pairs)
    draw: float = 1.5            # a timed call's draw window: message to "drawn"
    launch: float = 0.5          # behind the closed gate, in no window
    device: float = 1.0          # the device window: gate open to "done" (run 59: 1.49 ms on average)
    reply: float = 3.5           # the worker's check and the reply, the parent's checks: in no window
    host_gap: float = 0.5        # the parent between two pieces of check work
    check_calls: int = 2
    verify_timed: int = 4
    pairs: int = 20
    warmup_pairs: int = 2
    paired: bool = False         # a pair's two calls drawn in one draw window, then their two device windows
    draw_window: bool = True     # off: a timed call draws behind its closed gate (0.18.0 `fill_behind`), in no window
    host_per_size: float = 1500.0  # the grade's work in no window, per size: start-up, compiling, the expert's and
    # reference's starts, builds (run 59: loops took 31% of the slots' time)


RUN66 = {"draw_window": False, "device": 1.05, "check_call": 82.0, "fetch": 23.5, "inputs": 6.2, "reference": 95.0,
         "compare": 10.2}
"""H200 run 66's check work (ms, means): a check call's round trip, a verification's parts."""

VARIANTS = {
    "run 59": {},
    "reference 12 ms shorter": {"reference": 32.8},
    "check calls half as long": {"check_call": 36.0},
    "loops' draws half as long": {"draw": 0.75},
    "2 timed outputs verified": {"verify_timed": 2},
    "device windows half as long": {"device": 0.5},
    "no check work (the loops alone)": {"check_calls": 0, "verify_timed": 0, "warmup_expert": 0.0},
    "a pair's calls drawn together": {"paired": True},
    "drawn together and device windows half as long": {"paired": True, "device": 0.5},
    "every slot always timing (no host work)": {"host_per_size": 0.0},
    "draws behind the gate (0.18.0)": {"draw_window": False, "device": 1.05},
    "draws behind + every answer kept": {"draw_window": False, "device": 1.05, "reference": 0.0},
    "draws behind + answers kept + check calls gated": {"draw_window": False, "device": 1.05, "reference": 0.0,
                                                      "check_call": 8.0},
    "draws behind + answers kept + no check call": {"draw_window": False, "device": 1.05, "reference": 0.0,
                                                  "check_calls": 0},
    "run 66 (0.18.0: answers kept on the host)": dict(RUN66),
    "run 66 less empty-cache and pool copy in the answer's window": {**RUN66, "reference": 54.0},
    "run 66 with the reference's answer gated (its device work alone)": {**RUN66, "reference": 8.0},
    "run 66 with answers and check calls gated": {**RUN66, "reference": 8.0, "check_call": 10.0},
}


def slot(lock: DeviceLock, shape: Shape, scale: float, stop: threading.Event, done: list, trips: list,
         looped: list) -> None:
    def hold(ms: float) -> None:
        time.sleep(ms * scale / 1e3)

    def check(ms: float) -> None:
        with lock.check("sim"):
            hold(ms)
        hold(shape.host_gap)

    while not stop.is_set():
        hold(shape.host_per_size)
        for _ in range(shape.check_calls):
            check(shape.check_call)
            for ms in (shape.fetch, shape.inputs, shape.reference, shape.compare):
                check(ms)
        check(shape.warmup_expert)
        t_loop = time.perf_counter()
        with lock.loop():
            for _ in range(2 * shape.warmup_pairs):
                with lock.window("draw"):
                    hold(shape.whole_call)
            for _ in range(shape.pairs if shape.paired else 2 * shape.pairs):
                t = time.perf_counter()
                with lock.window("draw") if shape.draw_window else contextlib.nullcontext():
                    hold(shape.draw)  # paired: both workers draw at once, each in its own process
                hold(shape.launch)
                for _ in range(2 if shape.paired else 1):
                    with lock.window("device"):
                        hold(shape.device)
                hold(shape.reply)
                trips.append(time.perf_counter() - t)
            for _ in range(shape.verify_timed):
                for ms in (shape.fetch, shape.reference, shape.compare):
                    with lock.window("draw"):
                        hold(ms)
                    hold(shape.host_gap)
        looped.append(time.perf_counter() - t_loop)
        if not stop.is_set():
            done.append(time.perf_counter())


def run(shape: Shape, slots: int, seconds: float, scale: float) -> dict:
    lock = DeviceLock()
    stop, done, trips, looped = threading.Event(), [], [], []
    threads = [threading.Thread(target=slot, args=(lock, shape, scale, stop, done, trips, looped), daemon=True)
               for _ in range(slots)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    wall = time.perf_counter() - t0
    stats = lock.stats()
    for t in threads:
        t.join(60)
    return {"sizes_per_s": len(done) / wall, "calls_per_s": stats["windows"] / wall,
            "trip_ms": 1e3 * statistics.median(trips) / scale if trips else float("nan"),
            "draws": stats["draws_held_s"] / wall, "waiting": stats["device_waiting_s"] / wall,
            "looping": sum(looped) / (slots * wall)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=30.0, help="per variant")
    ap.add_argument("--scale", type=float, default=1.0, help="every sleep times this (a slow machine: above 1)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated of: {', '.join(VARIANTS)}")
    args = ap.parse_args(argv)
    print(f"{args.slots} slots, {args.seconds:.0f} s each, sleeps x{args.scale:g}")
    print("variant\tsizes/s\tx the first\ttimed calls/s\tround trip ms\tdraws held\tdevice waiting\tslots in loops")
    base = None
    for name in args.variants.split(","):
        shape = replace(Shape(), **VARIANTS[name])
        got = run(shape, args.slots, args.seconds, args.scale)
        base = base or got["sizes_per_s"]
        ratio = f"{got['sizes_per_s'] / base:.2f}x" if base else "-"
        print(f"{name}\t{got['sizes_per_s']:.2f}\t{ratio}\t{got['calls_per_s']:.0f}\t"
              f"{got['trip_ms']:.1f}\t{got['draws']:.0%}\t{got['waiting']:.0%}\t{got['looping']:.0%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
