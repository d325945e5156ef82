"""Graded attempts per GPU-hour: our zygote backend against a fresh-process baseline, same attempts.

    python bench/grading_throughput.py [--n 40] [--workers 4] [--cuda-l1 12] [--out DIR]

The corpus is fixed: the first N demo attempts (every kind: correct, wrong, crashing, cheats) plus,
on a GPU, a sample of real CUDA-L1 attempts. Both backends grade the same requests with the same
protocol (sizes, seeds, repetitions, checks); only how workers start differs:
- `zygote`: each attempt gets a worker forked from a pre-imported zygote; `--workers` attempts are in
  flight (start-up, compilation and correctness overlap on the CPU cores; timing holds the GPU alone);
- `fresh`: one new Python interpreter per attempt, one attempt at a time, the way KernelBench's batch
  evaluator runs (import torch, init CUDA, compile, check, time, exit).
Prints one table; on CPU it runs at a small size so CI can smoke-test it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.contract import GradeRequest  # noqa: E402

PHASES = ("startup", "compile", "correctness", "timing")


def corpus(n_demo: int, n_cuda_l1: int, cuda: bool) -> tuple[list[GradeRequest], list[str]]:
    reqs = []
    demo = ROOT / "demo" / "attempts.jsonl"
    for line in demo.read_text().splitlines()[:n_demo]:
        rec = json.loads(line)
        intended = (rec.get("extra") or {}).get("intended", "")
        if intended == "hang":  # a hang costs its timeout in both backends alike and says nothing about start-up
            continue
        reqs.append(GradeRequest(attempt_id=rec["attempt_id"], task_id=rec["task_id"], source=rec["source"],
                                 language=rec["language"], timeout_s=60, seed=11))
    extra_cards: list[str] = []
    if cuda and n_cuda_l1:
        from bench.cuda_l1_sample import sample_requests

        more, extra_cards, _ = sample_requests(n_cuda_l1)
        reqs += more
    return reqs, extra_cards


class UtilSampler:
    """Samples NVML GPU utilisation every 100 ms while grading runs (GPU busy fraction)."""

    def __init__(self, cuda: bool):
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = None
        if cuda:
            try:
                import pynvml

                pynvml.nvmlInit()
                self._nvml, self._h = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
                self._thread = threading.Thread(target=self._run, daemon=True)
            except Exception:  # noqa: BLE001 - no NVML: busy fraction is reported as unknown
                self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.samples.append(int(self._nvml.nvmlDeviceGetUtilizationRates(self._h).gpu))

    def __enter__(self):
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join()

    @property
    def busy(self) -> float | None:
        return sum(self.samples) / (100 * len(self.samples)) if self.samples else None


def run_backend(name: str, mode: str, workers: int, reqs, extra_cards, cuda: bool) -> dict:
    from grader.service import GraderService

    t_boot = time.perf_counter()
    with GraderService(mode=mode, workers=workers, catalogue_extra=extra_cards) as svc:
        boot = time.perf_counter() - t_boot
        t0 = time.perf_counter()
        with UtilSampler(cuda) as util:
            results = list(svc.grade(reqs, on_result=lambda r: print(
                f"  {mode}: {r.attempt_id}\t{r.status.value}\t{r.reward:+.3f}", file=sys.stderr, flush=True)))
        wall = time.perf_counter() - t0
    per = {p: [r.phase_seconds.get(p, 0.0) for r in results] for p in PHASES + ("total",)}
    return {"backend": name, "mode": mode, "workers": workers, "attempts": len(results), "wall_s": wall,
            "boot_s": boot, "per_gpu_hour": 3600 * len(results) / wall,
            "per_gpu_hour_with_boot": 3600 * len(results) / (wall + boot), "busy": util.busy, "per": per,
            "statuses": {s: sum(r.status.value == s for r in results) for s in {r.status.value for r in results}},
            "results": {r.attempt_id: (r.status.value, r.reward) for r in results}}


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="demo attempts (default: 60 on GPU, 8 on CPU)")
    ap.add_argument("--cuda-l1", type=int, default=12, help="CUDA-L1 attempts added on a GPU")
    ap.add_argument("--workers", type=int, default=None, help="zygote workers (default: 6 on GPU, 2 on CPU)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from grader.service import pick_device

    cuda = pick_device().startswith("cuda")
    n = args.n or (60 if cuda else 8)
    workers = args.workers or (6 if cuda else 2)
    reqs, extra = corpus(n, args.cuda_l1, cuda)
    rows = [run_backend("kerneltraj zygote", "zygote", workers, reqs, extra, cuda),
            run_backend("fresh process (baseline)", "fresh", 1, reqs, extra, cuda)]
    agree = sum(rows[0]["results"][k][0] == rows[1]["results"][k][0] for k in rows[0]["results"])
    print(f"device: {'cuda' if cuda else 'cpu'}; attempts: {len(reqs)}; same status in both backends: "
          f"{agree}/{len(reqs)}")
    head = ["backend", "workers", "attempts/GPU-h", "incl. boot", "wall s", "boot s", "GPU busy"] + \
           [f"{p} med/p90 s" for p in PHASES + ("total",)]
    print("\t".join(head))
    for r in rows:
        cells = [r["backend"], str(r["workers"]), f"{r['per_gpu_hour']:.0f}", f"{r['per_gpu_hour_with_boot']:.0f}",
                 f"{r['wall_s']:.1f}", f"{r['boot_s']:.1f}",
                 "n/a" if r["busy"] is None else f"{r['busy']:.0%}"]
        cells += [f"{statistics.median(r['per'][p]):.2f}/{pct(r['per'][p], 0.9):.2f}" for p in PHASES + ("total",)]
        print("\t".join(cells))
    print(f"ratio (zygote / fresh attempts per GPU-hour): {rows[0]['per_gpu_hour'] / rows[1]['per_gpu_hour']:.1f}x")
    print("statuses:", {r["backend"]: r["statuses"] for r in rows})
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "throughput.json").write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
