"""Device-wide timing of one call, and the statistics that decide how many calls are enough.

`DeviceClock` captures every timer it uses when it is built, so code loaded later cannot swap
them. A call's time is the larger of the CUDA-event interval on the current stream and the host
interval up to a device-wide synchronisation (less the measured cost of an empty synchronise):
work a candidate hides on a side stream or defers lands inside the host interval.
"""
from __future__ import annotations

import math
import time


class DeviceClock:
    def __init__(self, device: str):
        import torch

        self.cuda = device.startswith("cuda")
        self._perf_ns = time.perf_counter_ns
        self._sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        if self.cuda:
            self._event = torch.cuda.Event
            self._record = torch.cuda.Event.record
            self._elapsed = torch.cuda.Event.elapsed_time
            self._flush_buf = torch.empty(256 << 20, dtype=torch.int8, device=device)  # > 4x the H200's 60 MB L2
        self.sync_overhead_ms = self._measure_overhead() if self.cuda else 0.0

    def now_ns(self) -> int:
        return self._perf_ns()

    def sync(self) -> None:
        self._sync()

    def flush_l2(self) -> None:
        if self.cuda:
            self._flush_buf.zero_()
            self._sync()

    def time_call(self, fn, args) -> tuple[object, float, float]:
        """Run fn(*args) once; returns (output, device-wide ms, host ms)."""
        if not self.cuda:
            t0 = self._perf_ns()
            out = fn(*args)
            host = (self._perf_ns() - t0) / 1e6
            return out, host, host
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        t0 = self._perf_ns()
        self._record(start)
        out = fn(*args)
        self._record(end)
        self._sync()
        host = (self._perf_ns() - t0) / 1e6
        return out, max(self._elapsed(start, end), host - self.sync_overhead_ms), host

    def _measure_overhead(self) -> float:
        gaps = []
        for _ in range(30):
            start, end = self._event(enable_timing=True), self._event(enable_timing=True)
            t0 = self._perf_ns()
            self._record(start)
            self._record(end)
            self._sync()
            gaps.append((self._perf_ns() - t0) / 1e6 - self._elapsed(start, end))
        return max(0.0, median(gaps))


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def median_ci(xs: list[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free ~95% confidence interval of the median from order statistics."""
    s = sorted(xs)
    n = len(s)
    if n < 3:
        return (s[0], s[-1])
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return (s[lo], s[max(hi, lo)])


def relative_halfwidth(xs: list[float]) -> float:
    lo, hi = median_ci(xs)
    m = median(xs)
    return (hi - lo) / (2 * m) if m > 0 else math.inf


def ratio_ci(a: list[float], b: list[float]) -> float:
    """Relative half-width of median(a)/median(b): the two relative half-widths in quadrature."""
    return math.hypot(relative_halfwidth(a), relative_halfwidth(b))
