"""Contention replay: a fixed sample of candidate/expert pairs regraded under declared sharing settings.

Settings: isolated; a co-tenant compute hog; a co-tenant memory-bandwidth hog; k graders
time-slicing one device; a foreground latency service sharing the device. Co-tenants are real
processes (pipelines.grading.cotenants) started and stopped here. What the device really looked like is
read from NVML (grader.fingerprint.collect) and stored with each setting; a declared setting that
NVML contradicts is flagged (MIG enabled is a different target, not an error). On the CPU there
is no NVML: the setting is recorded as unverifiable and every row carries the device.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from grader import fingerprint
from grader.sandbox import child_pids
from pipelines.grading.agreement import stable_order
from pipelines.grading.cotenants import CoTenant, LoadDriver, Role, ServiceStats
from pipelines.grading.client import GradeOutcome, GraderSpec
from pipelines.grading.replay_grader import ProcessGrader


class Setting(str, enum.Enum):
    """Declared sharing settings of the grading device (stored in each grade's `sharing`)."""

    ISOLATED = "isolated"
    COMPUTE_HOG = "compute_hog"
    MEMBW_HOG = "membw_hog"
    TIME_SLICED = "time_sliced"
    LATENCY_SERVICE = "latency_service"


COTENANTS: dict[Setting, tuple[Role, ...]] = {
    Setting.ISOLATED: (), Setting.COMPUTE_HOG: (Role.COMPUTE_HOG,), Setting.MEMBW_HOG: (Role.MEMBW_HOG,),
    Setting.TIME_SLICED: (), Setting.LATENCY_SERVICE: (Role.LATENCY_SERVICE,)}
"""Co-tenant programs each setting runs beside the grader."""


@dataclass(frozen=True)
class DevicePrice:
    """A declared price of one device-hour."""

    usd_per_hour: float
    """US dollars per device-hour."""
    basis: str
    """Where the figure comes from (an assumption is said to be one)."""


PRICE_TABLE: dict[str, DevicePrice] = {
    "NVIDIA H200": DevicePrice(3.50, "assumed on-demand cloud rate for one H200 GPU-hour, not a quote; "
                                     "replace with the contract price"),
}
"""Keyed by device name as the grader records it. A device not listed has an unknown price: per-dollar
figures for it stay null, never 0 (the CPU is deliberately not priced)."""


def price_usd_per_hour(device: str | None) -> float | None:
    p = PRICE_TABLE.get(device or "")
    return p.usd_per_hour if p else None


@dataclass(frozen=True)
class ReplayPlan:
    """What a contention replay runs; `for_device` declares the defaults."""

    settings: tuple[Setting, ...]
    """Settings in the order they run (isolated first: it is every other setting's reference)."""
    pairs: int
    """Candidate/expert pairs in the sample."""
    graders: int
    """k: grader services time-slicing the device in the time_sliced setting."""
    repeats: int
    """Grades per pair per setting (different seeds; aggregated per pair, never counted as tasks)."""
    max_primary_total_s: float | None
    """Only pairs whose primary grade took at most this many seconds (None: no cap)."""
    service_rate_hz: float
    """Requests per second the load driver sends the latency service."""
    service_baseline_s: float
    """Seconds the latency service is measured alone before grading starts beside it."""
    hog_warmup_s: float
    """Seconds a hog runs before the NVML reading and the grading start."""

    @staticmethod
    def for_device(cuda: bool, **overrides: Any) -> "ReplayPlan":
        # CPU: a small sample and cheap pairs keep the replay well under a minute and a half on 2 cores.
        base = ReplayPlan(settings=tuple(Setting), pairs=16 if cuda else 3, graders=4 if cuda else 2, repeats=1,
                          max_primary_total_s=None if cuda else 1.5, service_rate_hz=100.0 if cuda else 20.0,
                          service_baseline_s=3.0 if cuda else 1.0, hog_warmup_s=1.0 if cuda else 0.3)
        given = {k: v for k, v in overrides.items() if v is not None}
        if "settings" in given:
            wanted = [Setting(s) for s in given["settings"]]
            # isolated always runs, first: without it there is nothing to compare the others with.
            given["settings"] = (Setting.ISOLATED, *[s for s in wanted if s is not Setting.ISOLATED])
        if given.get("max_primary_total_s") == 0:
            given["max_primary_total_s"] = None
        return dataclasses.replace(base, **given)


SAMPLE_SALT = "kerneltraj/contention"


def sample_pairs(candidates: Sequence[dict], plan: ReplayPlan) -> tuple[list[dict], str]:
    """The declared deterministic sample, and its rule in words (stored with every setting row)."""
    pool = [c for c in candidates if plan.max_primary_total_s is None
            or (c.get("primary_total_s") or 0.0) <= plan.max_primary_total_s]
    chosen = sorted(pool, key=lambda c: stable_order(c["attempt_id"], SAMPLE_SALT))[:plan.pairs]
    cap = "" if plan.max_primary_total_s is None else f" whose primary grade took <= {plan.max_primary_total_s} s"
    rule = (f"correct current primary grades{cap}, ordered by sha256('{SAMPLE_SALT}/' + attempt_id), first "
            f"{plan.pairs}; each graded {plan.repeats}x per setting; k={plan.graders} in time_sliced")
    return sorted(chosen, key=lambda c: c["attempt_id"]), rule


def nothing_to_replay_on_cpu(candidates: Sequence[dict], **overrides: Any) -> str | None:
    """The sample rule when a grader started here would grade on the CPU (grader.service.pick_device, the grader
    process's own choice) and the CPU's plan draws no pair from `candidates` (none within its cap): the replay has
    nothing to grade, and no grader process need start only to be closed again. None otherwise."""
    pairs, rule = sample_pairs(candidates, ReplayPlan.for_device(False, **overrides))
    if pairs:
        return None
    from grader.service import pick_device  # imports torch, which the release's own passes have imported by now

    return rule if pick_device() == "cpu" else None


def replay_seed(attempt_id: str, repeat: int) -> int:
    """Same seed for a pair in every setting (a paired comparison), different from the primary and recheck."""
    digest = hashlib.sha256(f"{SAMPLE_SALT}/{attempt_id}/{repeat}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


class Flag(str, enum.Enum):
    """What NVML (or the co-tenant processes) said about a declared setting."""

    CPU_NO_NVML = "cpu_no_nvml"
    """CPU device: no NVML, the setting is recorded but cannot be verified."""
    NVML_UNAVAILABLE = "nvml_unavailable"
    """A GPU but NVML could not be read."""
    MIG_ENABLED = "mig_enabled"
    """A MIG slice: a different target than the whole GPU, not an error (process lists are not checked)."""
    EXCLUSIVE_COMPUTE_MODE = "exclusive_compute_mode"
    """The compute mode admits one process (or none), yet sharing was declared."""
    FOREIGN_PROCESSES = "foreign_processes"
    """Processes on the GPU that this replay did not start (an `isolated` run was not isolated)."""
    COTENANT_NOT_SEEN = "cotenant_not_seen"
    """A declared co-tenant is not among the GPU's processes."""
    PIDS_UNMATCHED = "pids_unmatched"
    """NVML lists as many processes as expected but none with our pids (another pid namespace)."""
    COTENANT_DIED = "cotenant_died"
    """A co-tenant exited or did no work before the setting ended."""


class Verdict(str, enum.Enum):
    """A setting's standing after the checks, worst first."""

    CONTRADICTED = "contradicted"
    DIFFERENT_TARGET = "different_target"
    UNVERIFIABLE = "unverifiable"
    VERIFIED = "verified"


FLAG_VERDICT: dict[Flag, Verdict] = {
    Flag.CPU_NO_NVML: Verdict.UNVERIFIABLE, Flag.NVML_UNAVAILABLE: Verdict.UNVERIFIABLE,
    Flag.MIG_ENABLED: Verdict.DIFFERENT_TARGET, Flag.EXCLUSIVE_COMPUTE_MODE: Verdict.CONTRADICTED,
    Flag.FOREIGN_PROCESSES: Verdict.CONTRADICTED, Flag.COTENANT_NOT_SEEN: Verdict.CONTRADICTED,
    Flag.PIDS_UNMATCHED: Verdict.UNVERIFIABLE, Flag.COTENANT_DIED: Verdict.CONTRADICTED}


@dataclass(frozen=True)
class NvmlCheck:
    """The flags raised against one declared setting and the resulting verdict."""

    flags: tuple[Flag, ...]
    """Every flag raised, in a fixed order."""
    verdict: Verdict
    """The worst verdict among the flags (verified when none)."""
    processes_listed: int | None
    """Compute processes NVML listed on the device (None without NVML)."""


def check_reading(setting: Setting, reading: dict[str, Any], own_pids: set[int], cotenant_pids: set[int],
                  cotenants_alive: bool = True) -> NvmlCheck:
    """Flags for a declared setting from one NVML reading (a fingerprint dict) taken while it was in force.

    own_pids: processes of this replay that may hold a context (the asset process); cotenant_pids: the
    co-tenants it started, which must be visible.
    """
    flags: list[Flag] = []
    listed_n: int | None = None
    if reading.get("kind") != "cuda":
        flags.append(Flag.CPU_NO_NVML)
    elif reading.get("nvml_error") or "other_processes" not in reading:
        flags.append(Flag.NVML_UNAVAILABLE)
    else:
        if reading.get("mig_mode") == "enabled":
            flags.append(Flag.MIG_ENABLED)
        mode = reading.get("compute_mode")
        if mode == "prohibited" or (setting is not Setting.ISOLATED and mode in ("exclusive_process",
                                                                                 "exclusive_thread")):
            flags.append(Flag.EXCLUSIVE_COMPUTE_MODE)
        listed = {int(p["pid"]) for p in reading.get("other_processes") or []}
        listed_n = len(listed)
        if Flag.MIG_ENABLED not in flags:
            allowed = own_pids | cotenant_pids
            foreign, unseen = listed - allowed, cotenant_pids - listed
            if foreign and unseen and not listed & allowed and len(listed) <= len(allowed):
                flags.append(Flag.PIDS_UNMATCHED)
            else:
                if foreign:
                    flags.append(Flag.FOREIGN_PROCESSES)
                if unseen:
                    flags.append(Flag.COTENANT_NOT_SEEN)
    if not cotenants_alive:
        flags.append(Flag.COTENANT_DIED)
    order = list(Verdict)
    verdict = min((FLAG_VERDICT[f] for f in flags), key=order.index, default=Verdict.VERIFIED)
    return NvmlCheck(tuple(flags), verdict, listed_n)


def descendants(pids: set[int]) -> set[int]:
    """Every live process below these (grader.sandbox.child_pids, from /proc)."""
    out, todo = set(), list(pids)
    while todo:
        for c in child_pids(todo.pop()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def read_nvml(cuda: bool) -> dict[str, Any]:
    """The device as NVML sees it now (grader.fingerprint's reading: MIG, compute mode, clocks, processes)."""
    return fingerprint.read_local(cuda)


@contextlib.contextmanager
def process_graders(spec: GraderSpec, n: int, device: str = "auto") -> Iterator[list[ProcessGrader]]:
    """n grader processes with these settings (pipelines.grading.replay_grader), started together, closed on
    exit."""
    if n <= 0:
        yield []
        return
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(lambda: ProcessGrader(spec).start(device)) for _ in range(n)]
    try:
        yield [f.result() for f in futures]  # raises the first start-up failure
    finally:
        for f in futures:
            if f.exception() is None:
                f.result().close()


@dataclass(frozen=True)
class ReplayGrade:
    """One grade of the replay with where it came from."""

    grader_index: int
    """Which of the k grader services graded it (0 outside time_sliced)."""
    repeat: int
    """Repeat number of the pair in this setting."""
    outcome: GradeOutcome
    """The grade and what it cost."""


@dataclass(frozen=True)
class SettingRun:
    """Everything one setting produced: its row and its grades."""

    row: dict[str, Any]
    """The contention_settings row."""
    grades: list[ReplayGrade]
    """Every grade that came back."""


def run_setting(setting: Setting, plan: ReplayPlan, grader: ProcessGrader, pairs: Sequence[dict],
                nvml: Callable[[], dict[str, Any]], run_id: str, sample_rule: str,
                log: Callable[[str], None] = lambda _: None) -> SettingRun:
    """Start the setting's co-tenants (and, time-sliced, k-1 more graders), read NVML, grade every pair on
    the clock, stop everything. `grader` is the replay's own grader process, held across settings."""
    device, device_name = grader.device, grader.device_name
    k = plan.graders if setting is Setting.TIME_SLICED else 1
    jobs = [(i % k, rep, p) for i, (rep, p) in enumerate((r, p) for r in range(plan.repeats) for p in pairs)]
    started_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    kind = "cuda" if device.startswith("cuda") else "cpu"
    row: dict[str, Any] = {
        "run_id": run_id, "setting": setting.value, "graders": k, "repeats": plan.repeats,
        "device": device_name, "device_kind": kind, "pairs": len(pairs),
        "grades_requested": len(jobs), "sample_rule": sample_rule,
        "price_usd_per_hour": price_usd_per_hour(device_name), "started_at": started_at}
    grades: list[ReplayGrade] = []
    tenants: list[CoTenant] = []
    wall, problems = 0.0, []
    own = {os.getpid(), grader.pid}
    pre: dict[str, Any] = {}
    post: dict[str, Any] = {}
    alone = shared = None
    try:
        with contextlib.ExitStack() as stack:
            # Extra graders start (and pay their start-up) before the clock, like the held one did.
            use = [grader, *stack.enter_context(process_graders(grader.spec, k - 1, device))]
            own |= {g.pid for g in use}
            for role in COTENANTS[setting]:
                tenants.append(stack.enter_context(CoTenant(role, device if kind == "cuda" else "cpu")))
            driver = None
            if setting is Setting.LATENCY_SERVICE:
                driver = LoadDriver(tenants[0].ready["port"], plan.service_rate_hz)
                driver.window(min(0.5, plan.service_baseline_s)).finish()  # warm-up requests, not counted
                alone = driver.window(plan.service_baseline_s).finish()
            if tenants:
                time.sleep(plan.hog_warmup_s)
            # A grader's workers hold the CUDA contexts, not the grader process: ours are those alive just before
            # the reading and just after it (a worker may start or end in between).
            before = descendants(own)
            pre = nvml()
            own |= before | descendants(own)
            log(f"contention [{setting.value}]: {len(jobs)} grades on {len(use)} grader(s), "
                f"co-tenants {[t.role.value for t in tenants] or 'none'}")
            if driver is not None:
                driver.window()
            t0 = time.monotonic()
            try:
                grades, problems = _grade_all(setting, use, jobs)
            finally:
                wall = time.monotonic() - t0
                if driver is not None:
                    shared = driver.finish()
            post = nvml()
    except Exception as e:  # noqa: BLE001 - one failed setting is recorded, the others still run
        problems.append(f"{type(e).__name__}: {e}")
    reports = [t.stop() for t in tenants]  # the ExitStack stopped them; this returns the kept reports
    # Every declared co-tenant started, did work, and was still running when the grading ended.
    cotenants_ok = len(reports) == len(COTENANTS[setting]) and all(
        r.alive_during and (r.iterations or 0) > 0 for r in reports)
    pre = pre or {"kind": kind, "nvml_error": "not read: the setting failed before its reading"}
    check = check_reading(setting, pre, own, {r.pid for r in reports}, cotenants_alive=cotenants_ok)
    row.update({
        "grades_recorded": len(grades), "missing": len(jobs) - len(grades), "wall_s": wall,
        "error": "; ".join(problems)[:1000] or None,
        "cotenants": json.dumps([dataclasses.asdict(r) for r in reports]),
        "cotenants_gone": all(r.gone for r in reports), "nvml_pre": json.dumps(pre, default=str),
        "nvml_post": json.dumps(post, default=str), "flags": json.dumps([f.value for f in check.flags]),
        "verdict": check.verdict.value, "processes_listed": check.processes_listed,
        **_service_cols("alone", alone), **_service_cols("service", shared)})
    return SettingRun(row, grades)


def _grade_all(setting: Setting, use: Sequence[ProcessGrader],
               jobs: list[tuple[int, int, dict]]) -> tuple[list[ReplayGrade], list[str]]:
    """Each grader grades its share at the same time as the others (threads); lost results become missing."""
    by_grader: dict[int, list[tuple[int, dict]]] = {}
    for g, rep, p in jobs:
        by_grader.setdefault(g, []).append((rep, p))
    out: list[ReplayGrade] = []
    lock = threading.Lock()
    errors: list[str] = []

    def work(g: int) -> None:
        backend = use[g]
        reqs, meta = [], {}
        for rep, p in by_grader[g]:
            req = backend.request(f"{p['attempt_id']}#{setting.value}#{rep}", p["task_id"], p["source"],
                                  p["language"], p["entry_point"] or "run", replay_seed(p["attempt_id"], rep))
            reqs.append(dataclasses.replace(req, sharing=setting.value))
            meta[req.attempt_id] = rep
        try:
            for o in backend.grade(reqs):
                with lock:
                    out.append(ReplayGrade(g, meta[o.result.attempt_id], o))
        except Exception as e:  # noqa: BLE001 - GradingIncomplete: what came back is kept, the rest is missing
            with lock:
                errors.append(f"grader {g}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(g,), daemon=True) for g in by_grader]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, errors


def _service_cols(prefix: str, s: ServiceStats | None) -> dict[str, Any]:
    return {f"{prefix}_requests": s.requests if s else None, f"{prefix}_errors": s.errors if s else None,
            f"{prefix}_p50_ms": s.p50_ms if s else None, f"{prefix}_p99_ms": s.p99_ms if s else None}


def replay_attempt_id(request_id: str) -> str:
    """The attempt id inside a replay request id `<attempt_id>#<setting>#<repeat>`."""
    return request_id.split("#", 1)[0]
