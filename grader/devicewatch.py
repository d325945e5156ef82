"""What NVML saw of the device while a slot timed alone on it.

A slot times its candidate and the expert twin holding the device lock exclusively, so nothing else
of this grader should run on the device then. On some H200s a whole timing loop ran twin and
candidate alike up to 2.7 times slower than the same loop a minute later (H200 runs 13 to 16), which
only other work on the device, or a lower clock, explains. So each loop is bracketed by two readings:
the SM clock and the clock-event (throttle) reasons at its start and end, and every process that NVML
sampled using the SMs or memory in between, named by its role in this grader where it is one of ours
(`slot 3 candidate`, `slot 1 reference`, `parent`) and by pid where it is not.

`DeviceWatch(nvml)` takes the NVML module (pynvml from nvidia-ml-py) or a replay with the same
functions, like `grader.fingerprint.collect`, so CPU-only CI runs this code on recorded readings.
A reading that fails is recorded as its error; it never fails a grade.

With `sample` (`GraderService(memory_watch=True)`), the watch reads the device's memory every `interval_s` on a
thread of its own and keeps the readings in which it was full (`FULL_FRACTION`), with what each process held then:
evidence `session.oom_floor` weighs when a candidate runs out of memory, beside the reading just after its reply,
which can come after another process gave memory back (H100 run 100). Its other reads are kept too while it samples.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

FULL_FRACTION = 0.05
"""A device with less than this share of its memory free is full."""

FULL_KEPT = 512
"""The full readings a watch keeps, the latest."""


class DeviceWatch:
    def __init__(self, nvml, index: int = 0, clock: Callable[[], float] = time.time):
        self.nvml = nvml
        nvml.nvmlInit()
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self._clock = clock
        self._lock = threading.Lock()  # one NVML reader at a time: slots time one after the other anyway
        self._full: collections.deque = collections.deque(maxlen=FULL_KEPT)  # (monotonic s, total, free, {pid: used})
        self.sampled = 0  # readings the sampling thread made
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    @classmethod
    def local(cls, cuda: bool) -> DeviceWatch | None:
        """The watch of this machine's device 0, or None without a GPU or NVML."""
        if not cuda:
            return None
        try:
            import pynvml

            return cls(pynvml)
        except Exception:  # noqa: BLE001 - no NVML: sizes record no watch, grading goes on
            return None

    def close(self) -> None:
        self._stop.set()
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that is going away anyway
            pass

    def mark(self) -> dict[str, Any]:
        """A reading at the start of a timing loop."""
        with self._lock:
            return {"t_us": int(self._clock() * 1e6), **self._clocks()}

    def since(self, mark: dict[str, Any], roles: dict[int, str]) -> dict[str, Any]:
        """What happened since `mark`: the clocks at both ends, the clock-event reasons seen at either, and
        the processes sampled on the device other than those `roles` names as the timed pair."""
        with self._lock:
            end = self._clocks()
            error = None
            try:
                samples = self.nvml.nvmlDeviceGetProcessUtilization(self.handle, mark["t_us"])
            except Exception as e:  # noqa: BLE001 - NOT_FOUND is no sample in the window; others are recorded
                samples = []
                if "Not Found" not in str(e):
                    error = str(e)[:200]
            seen: dict[int, dict[str, Any]] = {}
            for s in samples:
                pid, sm, mem = int(s.pid), int(s.smUtil), int(s.memUtil)
                if int(s.timeStamp) < mark["t_us"] or roles.get(pid, "").endswith(" timed") or not (sm or mem):
                    continue
                row = seen.setdefault(pid, {"pid": pid, "role": roles.get(pid, "not ours"), "sm_pct": 0, "mem_pct": 0,
                                            "samples": 0})
                row["sm_pct"], row["mem_pct"] = max(row["sm_pct"], sm), max(row["mem_pct"], mem)
                row["samples"] += 1
            others = sorted(seen.values(), key=lambda r: -r["sm_pct"])
        out = {"sm_mhz": [mark.get("sm_mhz"), end.get("sm_mhz")],
               "reasons": sorted(set(mark.get("reasons", [])) | set(end.get("reasons", []))),
               "others": others}
        if error or end.get("error") or mark.get("error"):
            out["error"] = error or end.get("error") or mark.get("error")
        return out

    def used(self) -> int | None:
        """Bytes of the device's memory in use now, by every process (one NVML read: no process list), or None."""
        info = self._memory_info()
        return None if info is None else int(info.total) - int(info.free)

    def share_used(self) -> float | None:
        """The share of the device's memory in use now, by every process (one NVML read), or None."""
        info = self._memory_info()
        return None if info is None or not int(info.total) else 1.0 - int(info.free) / int(info.total)

    def _memory_info(self):
        with self._lock:
            try:
                return self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
            except Exception:  # noqa: BLE001 - no reading
                return None

    def memory(self, pid: int) -> dict[str, int] | None:
        """The device's memory now (bytes): its total and free, and what process `pid` holds of it (None when NVML
        lists no such process: it holds no memory there). None when the reading fails."""
        with self._lock:
            try:
                info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
            except Exception:  # noqa: BLE001 - no reading: the caller decides as without a watch
                return None
            self._note(info, procs)
        used = next((int(p.usedGpuMemory) for p in procs if int(p.pid) == pid and p.usedGpuMemory is not None), None)
        return {"total": int(info.total), "free": int(info.free), "pid_used": used}

    def full_since(self, seconds: float, pid: int) -> list[dict[str, int | float | None]]:
        """The readings of the last `seconds` in which the device was full, latest first, each as `memory` gives one
        for `pid` (None where NVML did not list it), with `ago_s`, how long before now it was read."""
        now = time.monotonic()
        with self._lock:
            kept = [r for r in self._full if now - r[0] <= seconds]
        return [{"total": total, "free": free, "pid_used": procs.get(pid), "ago_s": now - t}
                for t, total, free, procs in reversed(kept)]

    def sample(self, interval_s: float) -> None:
        """Read the device's memory every `interval_s` on a thread of this watch's own until `close`, keeping the full
        readings (`full_since`): a process list is read only when the device reads full."""
        if self._sampler is not None:
            return

        def run() -> None:
            while not self._stop.wait(interval_s):
                with self._lock:
                    try:
                        info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
                        if is_full(int(info.total), int(info.free)):
                            self._note(info, self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle))
                    except Exception:  # noqa: BLE001 - a reading that fails is no evidence either way
                        continue
                    self.sampled += 1

        self._sampler = threading.Thread(target=run, name="device-memory-watch", daemon=True)
        self._sampler.start()

    def full_readings(self) -> int:
        """How many full readings the watch keeps now."""
        with self._lock:
            return len(self._full)

    def _note(self, info, procs) -> None:
        """Keep a reading (under the lock) if the device was full in it and the watch samples: without `sample`, an
        out-of-memory error is judged on the reading just after it alone, as before the sampling."""
        total, free = int(info.total), int(info.free)
        if self._sampler is not None and is_full(total, free):
            self._full.append((time.monotonic(), total, free,
                               {int(p.pid): int(p.usedGpuMemory) for p in procs if p.usedGpuMemory is not None}))

    def memory_by_role(self, roles: dict[int, str]) -> dict[str, int] | None:
        """Bytes of the device's memory each kind of process holds now (`roles`: pid -> "slot N role"; the role's
        last word names the kind: candidate, expert, reference, spare, parent; "not ours" for the rest), with
        "used" for the whole device. None when the reading fails. A whole process list: for a sample every few
        seconds, not for every call."""
        with self._lock:
            try:
                info = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
            except Exception:  # noqa: BLE001 - no reading
                return None
            self._note(info, procs)
        out = {"used": int(info.total) - int(info.free)}
        for p in procs:
            if p.usedGpuMemory is None:
                continue
            pid = int(p.pid)
            kind = roles[pid].rsplit(" ", 1)[-1] if pid in roles else "not ours"
            out[kind] = out.get(kind, 0) + int(p.usedGpuMemory)
        return out

    def _clocks(self) -> dict[str, Any]:
        nvml = self.nvml
        try:
            sm = int(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM))
            get = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
                or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            return {"sm_mhz": sm, "reasons": reason_names(int(get(self.handle)))}
        except Exception as e:  # noqa: BLE001 - recorded, never fatal
            return {"error": f"{type(e).__name__}: {e}"[:200]}


REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
           0x100: "display_clocks"}
"""NVML's clock-event reason bits (nvmlClocksEventReason*), by the names its header gives them."""


def is_full(total: int, free: int) -> bool:
    """Whether a device with `free` of `total` bytes free is full (`FULL_FRACTION`)."""
    return free < FULL_FRACTION * total


def reason_names(bits: int) -> list[str]:
    return [name for bit, name in REASONS.items() if bits & bit] + ([f"0x{bits & ~0x1FF:x}"] if bits & ~0x1FF else [])
