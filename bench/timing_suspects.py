"""Measure the suspects behind a noisy speedup, one at a time, in one process on one GPU.

    python3 bench/timing_suspects.py --out DIR [--tasks softmax_rows_fp32,gelu_fp32,...]

For a few catalogue experts at their GPU sizes it prints, per kernel:
- clock ramp: the first calls after two idle seconds against the settled median (and the SM clock
  NVML reads idle and busy);
- launch overlap: the L2 flush queued before the start event (the grader's way) against a flush
  finished before it, so the host's launch work is inside the interval;
- the done gap: end -> done across a device-wide synchronise, p50/p95/p99;
- in-process repeatability: |delta log2| between the medians of two blocks of calls.
Needs only torch, triton and nvidia-ml-py. Writes DIR/suspects.jsonl and prints a table.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_TASKS = "gelu_fp32,softmax_rows_fp32,row_sum_fp32,rmsnorm_fp16,matmul_fp16"


def sm_clock_mhz() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - a missing reading is printed as such
        return None


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def med(xs):
    return pct(xs, 0.5)


def main(argv=None) -> int:
    import torch

    from grader.catalogue import load_catalogue
    from grader.inputs import derive_seed, make_inputs, resolve_specs
    from grader.modload import load_source
    from grader.timing import DeviceClock

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--calls", type=int, default=60)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="kt-suspects-")  # the experts' module files, not the results folder
    cat = load_catalogue()
    clock = DeviceClock("cuda")
    flush_buf = clock._flush_buf
    ev = torch.cuda.Event
    rows = []
    out = open(args.out / "suspects.jsonl", "w")
    print("task\tsize\tsettled_us\tfirst3/settled\tsynced_flush/queued\tdone_gap_p50/p95/p99_us\tblock_dlog2"
          "\tsm_mhz idle->busy", flush=True)
    for task_id in args.tasks.split(","):
        card = cat[task_id]
        fn = load_source(card.expert, f"suspect_{task_id}", workdir).run
        size = card.public_sizes["gpu"][0]
        specs = resolve_specs(card, size)
        inputs = [make_inputs(specs, derive_seed(7, task_id, i), "cuda") for i in range(4)]
        fn(*inputs[0])
        torch.cuda.synchronize()
        time.sleep(2.0)
        idle_mhz = sm_clock_mhz()
        queued = [clock.time_call(fn, inputs[i % 4])[2] for i in range(args.calls)]
        busy_mhz = sm_clock_mhz()
        synced, gaps = [], []
        for i in range(args.calls):
            flush_buf.zero_()
            torch.cuda.synchronize()
            s, e, d = ev(enable_timing=True), ev(enable_timing=True), ev(enable_timing=True)
            s.record()
            fn(*inputs[i % 4])
            e.record()
            torch.cuda.synchronize()
            d.record()
            torch.cuda.synchronize()
            synced.append(s.elapsed_time(e))
            gaps.append(e.elapsed_time(d) * 1e3)
        settled = med(queued[10:])
        half = len(queued[10:]) // 2
        block = abs(math.log2(med(queued[10:10 + half]) / med(queued[10 + half:])))
        row = {"task": task_id, "size": size, "settled_ms": settled, "first3_ms": queued[:3],
               "synced_flush_ms": med(synced), "done_gap_us": [pct(gaps, q) for q in (0.5, 0.95, 0.99)],
               "block_dlog2": block, "sm_mhz_idle": idle_mhz, "sm_mhz_busy": busy_mhz, "queued_ms": queued}
        rows.append(row)
        out.write(json.dumps(row) + "\n")
        out.flush()
        print(f"{task_id}\t{size}\t{settled * 1e3:.1f}\t{med(queued[:3]) / settled:.3f}\t"
              f"{med(synced) / settled:.3f}\t" + "/".join(f"{g:.1f}" for g in row["done_gap_us"])
              + f"\t{block:.4f}\t{idle_mhz}->{busy_mhz}", flush=True)
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
