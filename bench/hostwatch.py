"""The host's side of an acceptance run: is the grading process, or the host's CPUs, what the slots wait for?

A timed call's round trip on the H200 was 34 ms for 0.07 ms of kernels (run 53), and a size's timing loop spent
2.3 of its 3.3 s waiting for the device lock's windows, whose holders' work is mostly host work: messages between
the parent's slot threads and their workers. So the acceptance run samples the host twice a second from a thread of
its own, in the grading process (the service's parent, where every slot's thread runs):

- the share of the host's CPUs busy (`/proc/stat`), and runnable threads (`/proc/loadavg`); and the share the
  hypervisor gave to other machines (`steal`), which the busy share holds too: H200 run 147's host ran a fixed loop in
  134-145 ms as two runs of an ABAB started and in 76-78 ms as the two between them did (read beside the run's
  service starting: why that is no reading of the host, `gpu_acceptance.environment`);
- the cores the parent uses (its `/proc/self/stat`) and the workers by role (`roles`: pid -> "slot N role");
- how late a thread of the parent wakes from a 0.5 ms sleep: what each slot thread waits for the GIL and a core
  after every reply, before it can open the next gate or give back its window;
- with `device_used` (bytes of the device's memory in use, NVML), how full the device gets: H200 run 65 ran an
  honest attempt out of memory between two readings the run took only at its end; with `device_roles` (bytes by
  kind of process, a whole process list: every `ROLES_EVERY`-th tick), who held it (run 66 filled 139.6 of 140.4 GiB
  and three experts' references ran out, and no reading said whose memory it was);
- the host's memory available (`/proc/meminfo`): the kept answers (grader.answers) are page-locked host memory
  under a 12 GiB budget, and `bench/answer_reuse.py` replays run 66 at 349 answers taken from the pool with it, 956
  with 48 GiB; whether the host has that to spare, beside every worker's, is for this reading to say.

`lines()` summarises the samples of one stretch of the run (round 1, or all of it) for summary.txt.
"""
from __future__ import annotations

import glob
import os
import statistics
import threading
import time
from typing import Callable

TICK_S = 0.5
PROBE_SLEEP_S = 0.0005
PROBES_PER_TICK = 4
ROLES_EVERY = 4
_HZ = os.sysconf("SC_CLK_TCK")


def cpu_jiffies(text: str) -> tuple[int, int, int]:
    """(busy, total, stolen) jiffies from `/proc/stat`'s first line: idle and iowait are not busy; stolen (its eighth
    field, `steal`: time the hypervisor ran something else while this machine's CPUs had work) is inside busy, as the
    slots wait through it too."""
    fields = [int(x) for x in text.split("\n", 1)[0].split()[1:]]
    fields += [0] * (8 - len(fields))  # a kernel too old to count steal
    total = sum(fields[:8])  # guest time is already inside user
    return total - fields[3] - fields[4], total, fields[7]


def proc_cpu_s(stat: str) -> float:
    """User plus system seconds from a `/proc/PID/stat` line (the fields after the command's closing paren)."""
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _HZ


def host_memory(text: str) -> tuple[int, int] | None:
    """(available, total) bytes from `/proc/meminfo`; None where it does not say both."""
    got = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemAvailable", "MemTotal") and rest.split():
            got[name] = int(rest.split()[0]) * 1024  # kB
    return (got["MemAvailable"], got["MemTotal"]) if len(got) == 2 else None


def memory_by_kind(reading: dict) -> str:
    """`DeviceWatch.memory_by_role`'s reading in GiB, the whole device first, then each kind, largest first."""
    kinds = sorted(((k, v) for k, v in reading.items() if k != "used"), key=lambda kv: -kv[1])
    return f"used {reading['used'] / 2**30:.1f}; " + ", ".join(f"{k} {v / 2**30:.1f}" for k, v in kinds)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cpu_model(cpuinfo: str) -> str:
    """The first `model name` of `/proc/cpuinfo` (x86), else its `Hardware`/`CPU part` line, else empty."""
    for key in ("model name", "Hardware", "CPU part"):
        for line in cpuinfo.splitlines():
            if line.split(":", 1)[0].strip() == key and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    return ""


LOOP_N = 2_000_000
"""Iterations of the fixed pure-Python loop `host_profile` times."""


def host_profile(repeats: int = 5) -> dict:
    """What the host is, for comparing runs on different machines: the same code graded round 1 of the acceptance in
    91 s on H100 run 102's host and in 111-125 s on runs 106-112's, whose fresh interpreters took 27.7-42.8 s an
    attempt against 17.7, and no run said what the hosts were. The CPU's model, the cores this process may use, the
    load average as the run starts, and the median milliseconds of a fixed single-threaded Python loop (`LOOP_N`
    additions): the parent's slot threads and every worker are Python on the host's cores. And the kernel's release:
    how soon a woken worker takes a core from another (a twin from its candidate, `launcher.worker_cpus`) is the
    scheduler's, which changed with the kernel (EEVDF from Linux 6.6). And its NUMA nodes and whether it balances
    them (`/proc/sys/kernel/numa_balancing`): balancing unmaps a running task's pages now and then to see where they
    are used, so even a spin faults (`grader.hangwatch`: H100 run 142's spin moved its own minor faults and a switch
    5.7 s into its call, run 140's about 11 s in)."""
    def loop() -> float:
        t = time.perf_counter()
        x = 0
        for i in range(LOOP_N):
            x += i
        return (time.perf_counter() - t) * 1e3

    before = _read("/proc/stat")
    times = sorted(loop() for _ in range(repeats))
    stolen = steal_share(before, _read("/proc/stat"))
    return {"cpu_model": cpu_model(_read("/proc/cpuinfo") or ""), "cpus": len(os.sched_getaffinity(0)),
            "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "python_loop_ms": round(times[len(times) // 2], 1),
            **({"loop_steal_pct": round(100 * stolen, 1)} if stolen is not None else {}), "kernel": os.uname().release,
            "numa_nodes": len(glob.glob("/sys/devices/system/node/node[0-9]*")),
            "numa_balancing": (_read("/proc/sys/kernel/numa_balancing") or "?").strip()}


def steal_share(before: str | None, after: str | None) -> float | None:
    """The share of the host's CPU time the hypervisor gave to others between two `/proc/stat` readings; None
    without both or without time between them."""
    if before is None or after is None:
        return None
    (_, t0, s0), (_, t1, s1) = cpu_jiffies(before), cpu_jiffies(after)
    return (s1 - s0) / (t1 - t0) if t1 > t0 else None


def profile_line(profile: dict) -> str:
    """One line of `host_profile` for summary.txt's head."""
    stolen = (f" ({profile['loop_steal_pct']:g}% of the CPUs' time stolen meanwhile)" if "loop_steal_pct" in profile
              else "")
    up = (f" ({profile['python_loop_ms_service_up']} ms with the service starting beside it)"
          if "python_loop_ms_service_up" in profile else "")
    return (f"host: {profile.get('cpu_model') or 'CPU model unknown'}, {profile.get('cpus')} cores, load "
            f"{profile.get('loadavg') or '?'} at the start, a fixed Python loop {profile.get('python_loop_ms')} ms"
            f"{stolen}{up}, Linux {profile.get('kernel') or '?'}, NUMA nodes {profile.get('numa_nodes', '?')} "
            f"(balancing {profile.get('numa_balancing', '?')})")


class Sampler:
    """A daemon thread named `name` that runs `_run` from `start()`; `_run` loops until `_stop` is set (`stop()`)."""

    def __init__(self, name: str):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        raise NotImplementedError


class HostWatch(Sampler):
    """Samples the host every `TICK_S` on a daemon thread until `stop()`; `roles()` names the service's workers."""

    def __init__(self, roles: Callable[[], dict[int, str]] | None = None, tick_s: float = TICK_S,
                 device_used: Callable[[], int | None] | None = None,
                 device_roles: Callable[[], dict | None] | None = None):
        self.roles = roles or dict
        self.device_used = device_used
        self.device_roles = device_roles
        self.tick_s = tick_s
        self.samples: list[dict] = []
        self.role_cpu: dict[int, tuple[str, float, float]] = {}  # pid -> (role, first seen cpu s, last seen cpu s)
        super().__init__("hostwatch")

    def _run(self) -> None:
        last = None
        while not self._stop.wait(self.tick_s):
            stat, me = _read("/proc/stat"), _read("/proc/self/stat")
            if stat is None or me is None:
                return  # not Linux: nothing to say
            late = []
            for _ in range(PROBES_PER_TICK):
                t = time.perf_counter()
                time.sleep(PROBE_SLEEP_S)
                late.append(time.perf_counter() - t - PROBE_SLEEP_S)
            busy, total, stolen = cpu_jiffies(stat)
            meminfo = _read("/proc/meminfo")
            now = {"t": time.perf_counter(), "busy": busy, "total": total, "stolen": stolen, "parent_s": proc_cpu_s(me),
                   "late_ms": [1e3 * x for x in late],
                   "runnable": int((_read("/proc/loadavg") or "0 0 0 0/0").split()[3].split("/")[0])}
            if last is not None:
                span = now["total"] - last["total"]
                by_role = (self.device_roles() if self.device_roles is not None
                           and len(self.samples) % ROLES_EVERY == 0 else None)
                self.samples.append({"t": now["t"], "busy": (now["busy"] - last["busy"]) / span if span else 0.0,
                                     "stolen": (now["stolen"] - last["stolen"]) / span if span else 0.0,
                                     "parent_cores": (now["parent_s"] - last["parent_s"]) / (now["t"] - last["t"]),
                                     "late_ms": now["late_ms"], "runnable": now["runnable"],
                                     "device_used": self.device_used() if self.device_used is not None else None,
                                     "device_roles": by_role,
                                     "host_memory": host_memory(meminfo) if meminfo else None})
            last = now
            for pid, role in list(self.roles().items()):
                text = _read(f"/proc/{pid}/stat")
                if text is None or role == "parent":
                    continue
                cpu = proc_cpu_s(text)
                kind = role.rsplit(" ", 1)[-1]
                first = self.role_cpu.get(pid, (kind, cpu, cpu))[1]
                self.role_cpu[pid] = (kind, first, cpu)

    def lines(self, t_from: float, t_to: float, label: str) -> list[str]:
        """The samples between two `time.perf_counter()` readings, summarised: medians and the 90th percentile."""
        rows = [s for s in self.samples if t_from <= s["t"] <= t_to]
        if not rows:
            return [f"  {label}\tno samples"]
        from grader.timing import quantile as q

        cores = os.cpu_count() or 1
        late = [x for s in rows for x in s["late_ms"]]
        busy = [s["busy"] for s in rows]
        stolen = [s["stolen"] for s in rows]
        parent = [s["parent_cores"] for s in rows]
        run = [float(s["runnable"]) for s in rows]
        used = [s["device_used"] / 2**30 for s in rows if s.get("device_used") is not None]
        device = ([f"  {label}\tdevice memory used (GiB) median {statistics.median(used):.1f}, p90 "
                   f"{q(used, 0.9):.1f}, max {max(used):.1f}"] if used else [])
        fullest = max((s["device_roles"] for s in rows if s.get("device_roles")), key=lambda r: r["used"], default=None)
        if fullest is not None:
            device.append(f"  {label}\tdevice memory by kind of process at the fullest of "
                          f"{sum(1 for s in rows if s.get('device_roles'))} readings (GiB)\t{memory_by_kind(fullest)}")
        host = [s["host_memory"] for s in rows if s.get("host_memory")]
        if host:
            free = [a / 2**30 for a, _ in host]
            device.append(f"  {label}\thost memory available (GiB) median {statistics.median(free):.1f}, min "
                          f"{min(free):.1f}, of {host[0][1] / 2**30:.1f}")
        return [f"  {label}\t{len(rows)} samples over {t_to - t_from:.0f} s; host CPUs busy (of {cores}) median "
                f"{100 * statistics.median(busy):.0f}%, p90 {100 * q(busy, 0.9):.0f}% (stolen by the hypervisor "
                f"median {100 * statistics.median(stolen):.1f}%, p90 {100 * q(stolen, 0.9):.1f}%); runnable threads "
                f"median {statistics.median(run):.0f}, p90 {q(run, 0.9):.0f}",
                f"  {label}\tparent (the slots' threads) cores used median {statistics.median(parent):.2f}, p90 "
                f"{q(parent, 0.9):.2f}; a parent thread woke late from a {1e3 * PROBE_SLEEP_S:.1f} ms sleep by "
                f"median {statistics.median(late):.3f} ms, p90 {q(late, 0.9):.3f}, p99 {q(late, 0.99):.3f}"] + device

    def role_lines(self) -> list[str]:
        """CPU seconds the workers used while sampled, by role (a worker's first and last tick bound it)."""
        by: dict[str, list[float]] = {}
        for kind, first, last in self.role_cpu.values():
            by.setdefault(kind, []).append(last - first)
        if not by:
            return []
        return ["  workers' CPU while sampled, by role\t" + "; ".join(
            f"{kind}: {sum(v):.0f} s over {len(v)} workers" for kind, v in sorted(by.items()))]
