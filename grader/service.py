"""The grading service: a pool of worker slots fed from a queue, results streamed back.

Each slot grades one attempt at a time in its own fresh worker; slots overlap start-up,
compilation and correctness on the CPU cores, while timing takes the device exclusively
(one lock per device), so no two attempts are ever timed at once.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
import queue
import sys
import tempfile
import threading
import traceback
import warnings
from typing import Callable, Collection, Iterable, Iterator

from grader.contract import GRADER_VERSION, GradeRequest, GradeResult, Reason, Status, reward
from grader.devicelock import DeviceLock


SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while a service runs (Python's default is 5 ms). The slot that
times holds the device alone and sends one call at a time; after each reply its thread needs the GIL, which
another slot's thread (a verdict, a /proc scan) would otherwise keep for up to 5 ms while the device idles."""


PARENT_TORCH_THREADS = 1
"""Torch's intra-op threads in the parent while a service runs. On the CPU the parent's host work is the
verifications' comparisons, each on its slot's thread in cache-sized pieces (`grader.compare.CHUNK`); a pool per
calling thread (OpenMP's way) would put a team of spinning threads per slot on the cores the CPU's timing uses. On
a GPU the parent computes nothing on the host, but with `Effort.host_verify` the same comparisons."""


MEMORY_WATCH_S = 0.1
"""How often the device watch reads the device's memory with `memory_watch` (one NVML call; a process list only when
the device reads full)."""

KEPT_TASKS = 2
"""Tasks whose expert and reference workers a slot keeps (`Slot.max_kept`) without `keep_tasks`."""


def kept_tasks_for(memory_gib: float, slots: int) -> int:
    """The tasks a slot keeps with `keep_tasks`: one more than `KEPT_TASKS` for every 2 GiB a slot of device memory
    beyond 96 GiB, at most 6. A task's two kept workers held about 2 GiB on H200 run 95 (at its end, 18.3 GiB for
    the references and 15.8 for the experts of at most 16 tasks), not set aside, and its grading reached 91.4 GiB
    with two tasks kept: an H200's 140 GiB with 8 slots keeps 4, an H100's 80 GiB no more than the default."""
    return min(6, KEPT_TASKS + max(0, int((memory_gib - 96) // (2 * max(1, slots)))))


def pick_device(device: str = "auto") -> str:
    if device != "auto":
        return device
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


class GraderService:
    def __init__(self, mode: str = "zygote", workers: int = 1, device: str = "auto",
                 catalogue_extra: list[str] | None = None, effort=None, hide_extra: list[str] | None = None,
                 address_space_mb: int | None = 16384, reference_arena: bool = True, task_affinity: bool = True,
                 own_root: bool = True, compile_cache: str | None = None, launch_gate: bool = True,
                 interleave: bool = True, draw_before_gate: bool = True, reference_first: bool = True,
                 output_arena: bool = True, split_window: bool = True, slow_loops: bool = True,
                 check_windows: bool = True, device_first: bool = True, build_ahead: int | None = None,
                 fill_behind: bool = True, answer_pool: bool = True, spare_workers: bool | None = None,
                 answer_budget_bytes: int | None = None, paired_windows: bool = True, traced_release: bool = True,
                 stalled_one_pair: bool = True, keep_tasks: bool | int = False, memory_watch: bool = True,
                 gated_check_calls: bool = True, settled_pairs: bool = True, slow_checks_warm: bool = True,
                 start_ahead: bool = True, gated_reference: bool = True, warmup_release: bool = True,
                 keep_size_memory: bool = True, nice_builds: bool = False,
                 task_workers: bool = True, fail_fast_builds: bool = True, seed_triton: bool = True,
                 seed_experts: bool = False, triton_key_once: bool = False, twin_apart: bool = False,
                 hang_watch: bool = True, answers_for_waiting: bool = True):
        """`reference_arena`, `task_affinity`, `own_root`, `launch_gate`, `interleave` (the timing loops of several
        slots at once, window by window: grader/devicelock.py), `device_first` (`DeviceLock`), `draw_before_gate`,
        `reference_first`, `split_window`, `slow_loops`, `check_windows`, `fill_behind`, `paired_windows`,
        `traced_release`, `stalled_one_pair`, `gated_check_calls`, `settled_pairs`, `slow_checks_warm`,
        `start_ahead`, `gated_reference`, `warmup_release`, `keep_size_memory`, `hang_watch` (`Effort`),
        `answer_pool`
        (reference answers kept across attempts: `grader.answers`; `answer_budget_bytes` the bytes they may hold,
        None for the device's `budget_for`),
        `spare_workers` (each slot starts its next candidate's worker while it grades, `Slot.spawn`; None: on a
        GPU only, where a start-up takes seconds of CUDA),
        `keep_tasks` (each slot keeps the expert and reference workers of more tasks than its last two, as many as
        the device's memory allows (`kept_tasks_for`; an int: that many), and takes a task it keeps before the
        queue's first; as it begins a task, the others' workers give their cached memory back:
        `Slot.set_aside_all_but`; off until a GPU run has measured it),
        `memory_watch` (the device watch reads the device's memory every `MEMORY_WATCH_S` on a thread of its own and
        keeps the readings in which it was full, for judging a candidate's out-of-memory error: `session.oom_floor`;
        on since grader 0.20.0: H100 runs 101 and 102 each judged one candidate's error the device's on a full
        reading from before it, and run 102's acceptance held every figure with it),
        `nice_builds` (the builders ahead run at `buildahead.BUILD_NICENESS`, so their compilers take the cores the
        grading's workers leave idle; off until a GPU run has measured it),
        `fail_fast_builds` (a build ahead ends at its first failed command instead of waiting for the others,
        `grader.ninjastop`: most failed CUDA-L1 builds fail in their C++ object a minute before their CUDA one ends;
        on since grader 0.21.1: on one H100, H100 runs 120 and 121, the builders' time fell 29% with the same
        verdicts, and the build that had ended every round, a failure in its C++ object, ended 37-48 s sooner),
        `seed_triton` (Triton's host module built once for the service and planted in every worker's own Triton
        cache, grader.tritonseed, instead of each worker's first kernel building it with the C compiler; on a GPU
        only; on since grader 0.21.2: on one H200, H200 run 124, a fresh worker's first kernel took 581 ms against
        1,062, and the acceptance with it, H200 run 123, held every figure; round 1's rate did not move beyond the
        runs' spread),
        `seed_experts` (the experts' compiled Triton kernels of the built-in tasks in a grading's queue, built
        ahead by processes of their own as the grading begins and planted in each such task's kept worker as it
        starts, grader.expertseed, instead of that worker's expert compiling them at its first call at each size:
        H100 run 125 spent 103 of its 1,840 slot-seconds in those compiling calls, 301 ms each; off: on one H200,
        H200 runs 128 and 129, such a call took 49 ms with its kernels planted against 93, but in round 1 the builders
        were mostly late and its rate did not move beyond the runs' spread),
        `triton_key_once` (each slot's zygote computes Triton's key of itself, `triton.runtime.cache.triton_key`,
        before it forks a worker, `zygote._triton_key_once`, so that no worker reads and digests Triton's 415 MB
        library at its first kernel: 363-403 ms once a zygote on H200 run 128; off, no gain in round 1's rate
        beside `seed_experts`, H200 run 129, nor alone: about 90 ms off each attempt's first call and none off its
        grade's slot time, H100 run 141),
        `twin_apart` (a slot's kept workers, its expert twins among them, run on the cores no slot is given, not on
        its candidate's: why in `launcher.worker_cpus`; on one H100, H100 runs 136 and 137, the twin saw its gate open
        after 0.027 ms against 2.375 and the acceptance held every figure, but round 1's rate did not move; off until
        an ABAB over every round has measured it),
        `task_workers` (a task whose expert and reference come from one author gets one kept worker a slot for both,
        `Slot.task`: one CUDA start and one device context a new task instead of two; on since grader 0.21.0: on one
        H100, H100 runs 118 and 119, round 1 graded 1,937 per GPU-hour with it against 1,677 without, every round
        3,094 against 2,630, the device's fullest reading 53 GiB against 77, and every figure of the acceptance held),
        `answers_for_waiting` (a computed answer is copied into the answer pool only while another attempt at its
        task waits in this grading's queue, and only if the pool would keep it, `AnswerPool.admit`: an answer no
        later grade of the call can take is not copied; on since H100 runs 149 and 150: the acceptance with it held
        every figure, and in round 1 on one machine the host copies were 7.4% of the slots' time against 11.5%
        without, at 2,828 per GPU-hour against 2,726; off for a caller that hands the service a few attempts at a time
        from a queue of its own, as the Ray backend's actors do, where the next call may bring the task again),
        `output_arena` (a candidate's fetches through its slot's page-locked arena, `Slot.lend_output_arena`):
        switches for comparing the grader with and without each (bench/gpu_acceptance.py --without); all on in
        production. `compile_cache`: the folder of extension
        builds shared across attempts of one program (grader.compile_cache), `off`, or None for a per-uid one
        under the temp dir (the pipeline passes KERNELTRAJ_COMPILE_CACHE from its settings). `build_ahead`: builders
        that compile attempts' extensions off the slots before their grades (grader.buildahead); None for
        `default_builders`, 0 for none (each compiles in its slot; always so without the cache)."""
        self.device = pick_device(device)
        self.task_affinity = task_affinity
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch_interval, SWITCH_INTERVAL_S))
        import torch

        self._torch_threads = torch.get_num_threads()
        torch.set_num_threads(PARENT_TORCH_THREADS)
        if self.device == "cpu":
            os.environ.setdefault("TRITON_INTERPRET", "1")  # experts run in this process too
        from grader import fingerprint
        from grader.compile_cache import BuildEnv, CompileCache
        from grader.catalogue import load_catalogue
        from grader.launcher import Slot, revealed_paths, sealed_paths
        from grader.session import Effort

        self.catalogue = load_catalogue(catalogue_extra)
        self.effort = dataclasses.replace(effort or Effort.for_device(self.device.startswith("cuda")),
                                          draw_before_gate=draw_before_gate, reference_first=reference_first,
                                          split_window=split_window, slow_loops=slow_loops, check_windows=check_windows,
                                          fill_behind=fill_behind, paired_windows=paired_windows,
                                          traced_release=traced_release, stalled_one_pair=stalled_one_pair,
                                          gated_check_calls=gated_check_calls, settled_pairs=settled_pairs,
                                          slow_checks_warm=slow_checks_warm, start_ahead=start_ahead,
                                          gated_reference=gated_reference, warmup_release=warmup_release,
                                          keep_size_memory=keep_size_memory, hang_watch=hang_watch)
        from grader.answers import AnswerPool, budget_for

        # kept across the attempts this service grades, in page-locked host memory on a GPU host
        budget = budget_for(self.device) if answer_budget_bytes is None else answer_budget_bytes
        self.answers = AnswerPool(budget_bytes=budget) if answer_pool else None
        self.answers_for_waiting = answers_for_waiting
        cuda = self.device.startswith("cuda")
        # Builders see no device: the arch list torch would pick from it is set for them and the workers alike.
        from grader import buildahead

        self._arch_env = os.environ.get("TORCH_CUDA_ARCH_LIST")
        self.arch_list = self._arch_env or (buildahead.arch_list(self.device) if cuda else None)
        if self.arch_list and not self._arch_env:  # the workers' (read when their zygotes start, just below)
            os.environ["TORCH_CUDA_ARCH_LIST"] = self.arch_list
        self.fingerprint = fingerprint.read_local(cuda)
        self.fingerprint_id = fingerprint.fingerprint_id(self.fingerprint)
        self.device_name = self.fingerprint.get("gpu_name") or (_cuda_name() if cuda else "cpu")
        # Extension builds shared across attempts of the same program (grader.compile_cache); the
        # root is hidden from every worker like the rest of the sealed parent's files.
        root = compile_cache or os.path.join(tempfile.gettempdir(), f"kerneltraj-ext-cache-{os.geteuid()}")
        self.ext_cache = None
        if root != "off":
            try:
                self.ext_cache = CompileCache(root)
            except OSError as e:  # grading goes on without it: every extension compiles
                warnings.warn(f"extension compile cache off: {e}", RuntimeWarning, stacklevel=2)
        self.build_env = BuildEnv.local(self.device) if self.ext_cache is not None else None
        cache_dirs = [str(self.ext_cache.root)] if self.ext_cache is not None else []
        self._hide_extra = (hide_extra or []) + (catalogue_extra or []) + cache_dirs
        hide = sealed_paths(self._hide_extra)
        self.builders = 0 if self.ext_cache is None else (
            buildahead.default_builders(self.device) if build_ahead is None else max(0, build_ahead))
        self._address_space_mb = address_space_mb  # the builders' limit too: they run what a worker's load runs
        self.nice_builds = nice_builds
        self.fail_fast_builds = fail_fast_builds
        self._ahead: dict[int, dict] = {}  # id(request) -> its build ahead's record, until a slot takes it
        memory_gib = (self.fingerprint.get("memory_total_mib") or 0) / 1024
        self.kept_tasks = (kept_tasks_for(memory_gib, workers) if keep_tasks is True else int(keep_tasks)
                           if keep_tasks else KEPT_TASKS)
        self.keep_tasks = bool(keep_tasks)
        self.triton_seed: dict = {}
        """What `seed_triton` built and gave the slots (grader.tritonseed's record, with `slots`: how many took it)."""
        seeding = None
        if seed_triton and cuda and mode == "zygote":  # built while the zygotes import
            from grader import tritonseed
            from grader.launcher import base_env

            seed_box: list = []
            seeding = threading.Thread(target=lambda: seed_box.append(tritonseed.build(base_env(self.device))),
                                       daemon=True)
            seeding.start()
        self.slots = [Slot(i, mode, self.device, hide, reveal=revealed_paths(), address_space_mb=address_space_mb,
                           defer_ready=True, slots=workers, reference_arena=reference_arena, own_root=own_root,
                           launch_gate=launch_gate, output_arena=output_arena,
                           spares=cuda if spare_workers is None else spare_workers, kept_tasks=self.kept_tasks,
                           task_workers=task_workers, triton_key_once=triton_key_once, twin_apart=twin_apart)
                      for i in range(workers)]
        for slot in self.slots:  # every zygote imports torch at once, not one after the other
            slot.await_ready()
        if seeding is not None:
            seeding.join()
            files, self.triton_seed = seed_box[0] if seed_box else ({}, {"error": "the seed's build raised"})
            self.triton_seed["slots"] = sum(slot.seed_triton(files) for slot in self.slots) if files else 0
        self.expert_builds = None
        """The builders of the experts' kernels (`seed_experts`: grader.expertseed.Builds); None when off."""
        if seed_experts and mode == "zygote":
            from grader import expertseed
            from grader.launcher import base_env

            self.expert_builds = expertseed.Builds(base_env(self.device), self.device)
        self.gpu_lock = DeviceLock(interleave=interleave, device_first=device_first)
        for slot in self.slots:
            slot.note = self.gpu_lock.note
        from grader.devicewatch import DeviceWatch

        self.watch = DeviceWatch.local(cuda)
        self.memory_watch = memory_watch and self.watch is not None
        if self.memory_watch:
            self.watch.sample(MEMORY_WATCH_S)
        self._tasks: dict[str, object] = {}
        self._tasks_lock = threading.Lock()

    def __enter__(self) -> "GraderService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        sys.setswitchinterval(self._switch_interval)
        if self._arch_env is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        import torch

        torch.set_num_threads(self._torch_threads)
        if self.expert_builds is not None:
            self.expert_builds.close()
        for slot in self.slots:
            slot.close()
        if self.watch is not None:
            self.watch.close()

    def roles(self) -> dict[int, str]:
        """pid -> role of every process of this service that may use the device (for the device watch)."""
        out = {os.getpid(): "parent"}
        for slot in self.slots:
            out.update({pid: f"slot {slot.index} {role}" for pid, role in slot.seen_roles().items()})
        return out

    def task(self, task_id: str):
        from grader.session import SealedTask

        with self._tasks_lock:
            if task_id not in self._tasks:
                self._tasks[task_id] = SealedTask(self.catalogue[task_id], self.device, self.expert_builds)
            return self._tasks[task_id]

    def grade(self, requests: Iterable[GradeRequest],
              on_result: Callable[[GradeResult], None] | None = None) -> Iterator[GradeResult]:
        """Grade every request; yields exactly one result per request, in completion order. An attempt that may
        build an extension is built ahead by the builders first (grader.buildahead), and waits for a slot until
        then."""
        requests = list(requests)
        if self.expert_builds is not None:  # the queue's first tasks first (grader.expertseed)
            from grader.expertseed import jobs_for

            tasks = dict.fromkeys(r.task_id for r in requests if r.task_id in self.catalogue)
            self.expert_builds.start(jobs_for([self.task(t) for t in tasks], self.device))
        ahead = self._to_build(requests)
        todo = _Queue(requests, self.task_affinity, held={id(r) for r, _ in ahead})
        n = len(todo)
        builders = None
        if ahead:
            from grader.buildahead import BUILD_NICENESS, Builders

            def built(req: GradeRequest, record: dict) -> None:
                self._ahead[id(req)] = record
                todo.release(req)

            builders = Builders(min(self.builders, len(ahead)), self.ext_cache, self.build_env, built,
                                hide_extra=self._hide_extra, address_space_mb=self._address_space_mb,
                                arch=self.arch_list, nice=BUILD_NICENESS if self.nice_builds else 0,
                                fail_fast=self.fail_fast_builds)
            for req, source in ahead:
                builders.submit(req, source, req.timeout_s)
        done: queue.Queue = queue.Queue()
        threads = [threading.Thread(target=self._run_slot, args=(slot, todo, done), daemon=True)
                   for slot in self.slots[:max(1, min(len(self.slots), n))]]
        for t in threads:
            t.start()
        try:
            for _ in range(n):
                result = done.get()
                if on_result:
                    on_result(result)
                yield result
            for t in threads:
                t.join()
        finally:
            if builders is not None:
                builders.close()

    def _to_build(self, requests: list[GradeRequest]) -> list[tuple[GradeRequest, str]]:
        """The requests to build ahead, each with the module text its worker will load."""
        if not self.builders:
            return []
        from grader.buildahead import wants_build
        from grader.session import Floor, loaded_source

        out = []
        for req in requests:
            card = self.catalogue.get(req.task_id)
            if card is None or not wants_build(req.source, req.language, self.device):
                continue
            try:
                out.append((req, loaded_source(req, card)[0]))
            except Floor:  # the grade floors it before any load
                continue
        return out

    def grade_one(self, req: GradeRequest) -> GradeResult:
        return next(iter(self.grade([req])))

    def _run_slot(self, slot, todo: "_Queue", done: queue.Queue) -> None:
        from grader.session import grade_attempt

        last = None
        while True:
            req = todo.take(last, kept=self._tasks_kept_in(slot))
            if req is None:
                return
            last = req.task_id
            try:
                if req.task_id not in self.catalogue:  # no grade at all: the request is at fault, not a worker
                    done.put(self._infra(req, f"task {req.task_id!r} is not in the grader's catalogue; "
                                              "`python -m grader tasks` lists the tasks it grades",
                                         Reason.UNKNOWN_TASK))
                    continue
                if self.keep_tasks:
                    slot.set_aside_all_but(self.task(req.task_id).expert_key)
                done.put(grade_attempt(req, self.task(req.task_id), slot,
                                       fingerprint=self.fingerprint, fingerprint_id=self.fingerprint_id,
                                       device_name=self.device_name, gpu_lock=self.gpu_lock, effort=self.effort,
                                       ext_cache=self.ext_cache, build_env=self.build_env,
                                       watch=self.watch, roles=self.roles, ahead=self._ahead.pop(id(req), None),
                                       answers=self.answers,
                                       waiting=functools.partial(todo.waiting, req.task_id)
                                       if self.answers_for_waiting else None))
            except Exception as e:  # noqa: BLE001 - a grader bug ends this attempt as infra_error, never lost
                done.put(self._infra(req, f"grader error: {type(e).__name__}: {e} "
                                          f"| {traceback.format_exc().splitlines()[-3:]}"))

    def _tasks_kept_in(self, slot) -> set[str]:
        """The task ids whose workers `slot` keeps, for the queue to prefer (`keep_tasks`); none without it."""
        if not self.keep_tasks:
            return set()
        keys = slot.kept_keys()
        with self._tasks_lock:
            return {task_id for task_id, task in self._tasks.items() if task.expert_key in keys}

    def _infra(self, req: GradeRequest, why: str, code: Reason = Reason.INFRA) -> GradeResult:
        card = self.catalogue.get(req.task_id)
        return GradeResult(
            attempt_id=req.attempt_id, task_id=req.task_id, task_revision=card.revision if card else "unknown",
            grader_version=GRADER_VERSION, status=Status.INFRA_ERROR, reason_code=code, reason=why[:2000],
            reward=reward(Status.INFRA_ERROR, []), seed=req.seed, profile=req.profile, device=self.device_name,
            fingerprint_id=self.fingerprint_id, fingerprint=self.fingerprint, sharing=req.sharing)


class _Queue:
    """The requests waiting for a slot. A slot takes the next request of the task it graded last while
    there is one: its kept expert twin and reference worker (a device context each, seconds to start) then
    serve that task again instead of being replaced by another task's, and the answers its reference computed
    for the pool's seeds (grader.answers) are there for the next attempt. Else it takes the first task no
    other slot is grading, and one another slot grades only when no other is left: two slots on one task at
    once compute the same answers (H200 run 66's round 1, sorted by task, took 45 kept answers for 683
    verifications; `bench/answer_reuse.py` replays it at 55 with this queue, 43 without). Tasks come in the
    order of their first request, CUDA requests first: their extension builds take 30-80 s of CPU each, and
    started last they were what ended a round (H200 run 40: the device lock idle 54 s of 303). A request
    being built ahead (`held`, by id) waits outside until `release`, then its task goes first (to a slot
    that grades it, or to the next slot that looks if none does)."""

    def __init__(self, requests: Iterable[GradeRequest], affinity: bool = True, held: set[int] = frozenset()):
        self._affinity = affinity
        # each task's queued requests; tasks in the order of their first request (CUDA requests first)
        self._by_task: collections.OrderedDict[str, collections.deque] = collections.OrderedDict()
        self._first: set[str] = set()  # tasks that go first whatever a slot keeps: CUDA builds, released requests
        self._busy: collections.Counter = collections.Counter()  # task id -> slots grading it
        self._held_of: collections.Counter = collections.Counter()  # task id -> its requests held
        self._left = self._held = 0
        for req in sorted(requests, key=lambda r: r.language != "cuda"):  # stable: arrival order within each
            self._left += 1
            if id(req) in held:
                self._held += 1
                self._held_of[req.task_id] += 1
                continue
            self._by_task.setdefault(req.task_id, collections.deque()).append(req)
            if req.language == "cuda":
                self._first.add(req.task_id)
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)

    def __len__(self) -> int:
        return self._left

    def release(self, req: GradeRequest) -> None:
        """A held request is ready: the next slot to look takes it."""
        with self._lock:
            self._held -= 1
            self._held_of[req.task_id] -= 1
            self._by_task.setdefault(req.task_id, collections.deque()).appendleft(req)
            self._by_task.move_to_end(req.task_id, last=False)
            self._first.add(req.task_id)
            self._released.notify_all()  # the others look again: the last release may leave none to wait for

    def waiting(self, task_id: str) -> bool:
        """Whether a request of `task_id` waits here still, queued or held."""
        with self._lock:
            return bool(self._by_task.get(task_id)) or self._held_of[task_id] > 0

    def take(self, task_id: str | None, kept: Collection[str] = ()) -> GradeRequest | None:
        """The next request for a slot that graded `task_id` last (and is done with it); None once none is left,
        queued or held. `kept`: the tasks whose workers the slot keeps (`GraderService(keep_tasks=...)`); when it
        needs a new task, the first of those that no other slot grades comes before the queue's first, unless that
        one goes first anyway (a CUDA request's, whose build is long, or a request released from its build ahead)."""
        with self._lock:
            if self._busy[task_id] > 0:
                self._busy[task_id] -= 1
            while True:
                if self._affinity and self._by_task.get(task_id):
                    break
                if self._by_task:
                    # the first task nobody grades (one whose workers the slot keeps first, unless the first goes
                    # first anyway); of the tasks, at most one per slot is passed over
                    free = [t for t in self._by_task if not self._busy[t]]
                    task_id = (next(iter(self._by_task)) if not free else free[0] if free[0] in self._first
                               else next((t for t in free if t in kept), free[0]))
                    break
                if not self._held:
                    task_id = None
                    break
                self._released.wait()
            if task_id is None:
                return None
            waiting = self._by_task[task_id]
            req = waiting.popleft()
            if not waiting:
                del self._by_task[task_id]
            self._busy[task_id] += 1
            self._left -= 1
            return req


def _cuda_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)
