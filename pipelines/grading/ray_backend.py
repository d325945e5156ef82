"""Grading fanned out over a Ray cluster: one long-lived actor per GPU, each owning one GraderService.

Isolation is the grader's own: every actor runs a full `GraderService` (its zygote, its sandboxed
per-attempt workers, its device lock), so Ray only moves requests and verdicts (as JSON) and never
runs candidate code itself. Work is pulled: each actor takes the next small batch (one attempt per
worker slot) from a shared queue as soon as its previous batch is done, so fast actors take more.
Verdicts stream back as each attempt finishes (Ray streaming generators; a whole batch at a time
over Ray Client, which has no streaming actor methods).

Faults: an actor (or its node) lost mid-batch, or silent past its batch's deadline, costs only its
unanswered attempts; they go back to the front of the queue for a surviving or restarted actor, at
most `max_retries` times each. Every request yields exactly one `GradedItem`: a verdict, or an
infra_error naming why the retries ran out. Verdicts that arrive twice (an actor that was given up
on but still answered) are dropped, never yielded twice.
"""
from __future__ import annotations

import collections
import glob
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from grader.contract import (GRADER_VERSION, GradeRequest, GradeResult, Reason, Status, request_to_json,
                             reward)

NVLINK_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""NVLink multicast stays off on every actor (and so on every grader worker, which inherits these)."""


@dataclass(frozen=True)
class GradedItem:
    """One request's final verdict from the Ray backend, with how it got there."""

    result: GradeResult
    """The verdict (an infra_error made by the backend when every try was lost)."""
    retries: int
    """Times the attempt was re-queued because the actor holding it was lost (0 = first try counted)."""
    actor: str
    """Label of the actor that produced the verdict (`grader-<i>`); empty when the backend made it."""
    lost_s: float
    """Wall seconds the attempt spent on actors that were lost before answering."""


@dataclass
class _Job:
    index: int
    request: GradeRequest
    text: str
    retries: int = 0
    lost_s: float = 0.0
    why: list[str] = field(default_factory=list)


class _ActorLost(Exception):
    """The actor died, became unreachable, failed the call, or went silent past the deadline."""


class GraderActor:
    """Runs inside a Ray actor: one GraderService for the lifetime of the actor."""

    def __init__(self, label: str, scratch: str, mode: str, workers: int, device: str,
                 catalogue_extra: list[str] | None, compile_cache: str | None = None):
        from grader.service import GraderService

        self.label = label
        # The service's sealed workdir (reference and expert sources) goes under a per-actor folder, so the
        # one a killed incarnation left behind is removed when Ray restarts the actor.
        self.scratch = os.path.join(tempfile.gettempdir(), scratch)
        shutil.rmtree(self.scratch, ignore_errors=True)
        os.makedirs(self.scratch, mode=0o700)
        tempfile.tempdir = self.scratch
        # Each call brings a batch of one attempt a slot from the driver's queue: an answer copied for a task with no
        # other attempt in the batch still serves the actor's next batches (`answers_for_waiting` off).
        self.svc = GraderService(mode=mode, workers=workers, device=device, catalogue_extra=catalogue_extra,
                                 compile_cache=compile_cache, answers_for_waiting=False)

    def ready(self) -> dict[str, Any]:
        """Where this actor runs and on what (for infra results and the caller's logs)."""
        import ray

        return {"label": self.label, "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "device": self.svc.device_name, "fingerprint_id": self.svc.fingerprint_id,
                "fingerprint": self.svc.fingerprint}

    def grade_stream(self, requests: list[str]) -> Iterator[str]:
        """Grade a batch; yield each verdict as JSON as soon as it is decided."""
        from grader.contract import request_from_json

        for result in self.svc.grade([request_from_json(t) for t in requests]):
            yield result.to_json()

    def grade_list(self, requests: list[str]) -> list[str]:
        """The same, answered in one piece (Ray Client cannot stream from actors)."""
        return list(self.grade_stream(requests))

    def shutdown(self) -> None:
        self.svc.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class RayGradingBackend:
    """Sealed grading on a Ray cluster; `grade()` yields one GradedItem per request as verdicts arrive."""

    def __init__(self, address: str | None = None, actors: int | None = None, device: str = "auto",
                 mode: str = "zygote", workers_per_actor: int = 1, catalogue_extra: list[str] | None = None,
                 max_retries: int = 2, max_restarts: int = 3, num_cpus: int | None = None,
                 start_timeout_s: float = 900.0, grace_s: float = 120.0, runtime_env: dict | None = None,
                 compile_cache: str | None = None):
        """address: None starts a private local cluster; "auto" or "ray://host:10001" joins one.
        actors: None = one per GPU in the cluster, or 1 on a CPU-only cluster.
        max_retries: re-queues per attempt after lost actors; max_restarts: Ray restarts per actor.
        grace_s: slack over a batch's largest timeout_s before a silent actor is killed and restarted.
        compile_cache: each actor's folder of shared extension builds (GraderService), `off`, or None."""
        if workers_per_actor < 1 or max_retries < 0 or max_restarts < 0:
            raise ValueError("workers_per_actor >= 1, max_retries >= 0 and max_restarts >= 0 are required")
        self.address, self.device, self.mode = address, device, mode
        self.n_actors, self.workers_per_actor = actors, workers_per_actor
        self.catalogue_extra = [os.path.abspath(p) for p in catalogue_extra or []] or None
        self.max_retries, self.max_restarts = max_retries, max_restarts
        self.num_cpus, self.start_timeout_s, self.grace_s = num_cpus, start_timeout_s, grace_s
        self.runtime_env = runtime_env or {}
        self.compile_cache = compile_cache
        self.handles: dict[str, Any] = {}
        self.info: dict[str, dict[str, Any]] = {}
        self._in_flight: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._own_cluster, self._tmp, self._client, self._started = False, None, False, False
        self._revisions: dict[str, str] | None = None
        self._token = f"kerneltraj-ray-{uuid.uuid4().hex[:10]}"

    # -- cluster and actors -------------------------------------------------------------------------
    def start(self) -> "RayGradingBackend":
        """Connect (or start a local cluster) and create the actors; idempotent."""
        if self._started:
            return self
        import ray

        if not ray.is_initialized():
            if self.address is None:
                # Short path: Ray's unix sockets live under the temp dir and must stay < 108 bytes.
                self._tmp = tempfile.mkdtemp(prefix="ktray-", dir="/tmp")
                ray.init(address="local", num_cpus=self.num_cpus or max(1, self.n_actors or 1),
                         include_dashboard=False, _temp_dir=self._tmp, object_store_memory=256 * 1024 ** 2,
                         log_to_driver=False, namespace="kerneltraj")
            else:
                ray.init(address=self.address, namespace="kerneltraj", log_to_driver=False)
            self._own_cluster = True
        from ray.util.client import ray as client_ray

        self._client = client_ray.is_connected()
        gpus = int(ray.cluster_resources().get("GPU", 0))
        use_gpu = self.device.startswith("cuda") or (self.device == "auto" and gpus > 0)
        n = self.n_actors or (gpus if use_gpu else 1)
        env = {**NVLINK_ENV, **self.runtime_env.get("env_vars", {})}
        opts = dict(max_restarts=self.max_restarts, max_task_retries=0,  # we count retries, Ray must not
                    runtime_env={**self.runtime_env, "env_vars": env})
        if use_gpu:  # a GPU actor needs its GPU, not a logical CPU; Ray sets CUDA_VISIBLE_DEVICES to that GPU
            opts.update(num_gpus=1, num_cpus=0)
        else:
            opts.update(num_cpus=1)
        if n < 1:
            raise RuntimeError(f"no grader actors to start: the cluster has {gpus} GPU(s) and actors={self.n_actors}")
        cls = ray.remote(GraderActor)
        device = "cuda" if use_gpu else ("cpu" if self.device == "auto" else self.device)
        for i in range(n):
            label = f"grader-{i}"
            self.handles[label] = cls.options(**opts).remote(label, f"{self._token}-{label}", self.mode,
                                                             self.workers_per_actor, device, self.catalogue_extra,
                                                             self.compile_cache)
        self._started = True
        return self

    def close(self) -> None:
        """Close every actor's GraderService (zygotes, sealed workdirs), then the Ray connection if we opened it
        (a local cluster we started stops with it)."""
        import ray

        if not self._started:
            return
        try:
            ray.wait([h.shutdown.remote() for h in self.handles.values()], num_returns=len(self.handles),
                     timeout=30)
        except Exception:  # noqa: BLE001 - a dead actor has nothing left to close
            pass
        for h in self.handles.values():
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        self.handles.clear()
        if self._own_cluster:
            ray.shutdown()
        if self.address is None:  # local actors Ray could not restart left their folders here
            for p in glob.glob(os.path.join(tempfile.gettempdir(), self._token + "-*")):
                shutil.rmtree(p, ignore_errors=True)
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        self._started = False

    def __enter__(self) -> "RayGradingBackend":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_ready(self, timeout_s: float | None = None) -> dict[str, dict[str, Any]]:
        """Block until every actor has started its GraderService; returns where each one runs."""
        self.start()
        deadline = time.monotonic() + (timeout_s or self.start_timeout_s)
        for label in self.handles:  # they boot in parallel; waiting in turn costs only the slowest
            self.wait_actor(label, max(1.0, deadline - time.monotonic()))
        return dict(self.info)

    def in_flight(self) -> dict[str, list[str]]:
        """Attempt ids each actor holds right now (dispatched, not yet answered)."""
        with self._lock:
            return {k: list(v) for k, v in self._in_flight.items() if v}

    # -- grading ------------------------------------------------------------------------------------
    def grade(self, requests: Iterable[GradeRequest], max_retries: int | None = None) -> Iterator[GradedItem]:
        """Yield exactly one GradedItem per request, in completion order (max_retries overrides the default)."""
        self.start()
        retries = self.max_retries if max_retries is None else max_retries
        jobs = [_Job(i, r, request_to_json(r)) for i, r in enumerate(requests)]
        ids = [j.request.attempt_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("attempt ids must be unique within one grade() call")
        if not jobs:
            return
        todo: collections.deque[_Job] = collections.deque(jobs)
        cond = threading.Condition()
        events: queue.Queue = queue.Queue()
        stop = threading.Event()
        threads = [threading.Thread(target=self._drive, args=(label, todo, cond, events, stop, retries), daemon=True,
                                    name=f"ray-{label}") for label in self.handles]
        for t in threads:
            t.start()
        index_of = {j.request.attempt_id: j.index for j in jobs}
        done: set[int] = set()
        alive, why_dead = len(threads), []
        try:
            while len(done) < len(jobs):
                kind, payload = events.get()
                if kind == "exit":
                    alive -= 1
                    why_dead.append(payload)
                    if alive == 0:  # nobody left to grade what is still queued
                        with cond:
                            stranded, _ = list(todo), todo.clear()
                        for job in stranded:
                            job.why.append("no grader actor left: " + "; ".join(why_dead))
                            events.put(("item", self._exhausted(job, retries)))
                    continue
                item = payload
                index = index_of[item.result.attempt_id]
                if index in done:  # an answer from an actor we had given up on: already settled
                    continue
                done.add(index)
                yield item
        finally:
            stop.set()
            with cond:
                cond.notify_all()

    def _drive(self, label: str, todo: collections.deque, cond: threading.Condition, events: queue.Queue,
               stop: threading.Event, max_retries: int) -> None:
        """One actor's loop: take the next small batch, stream its verdicts, re-queue on loss."""
        handle = self.handles[label]
        exit_why = "stopped"
        try:
            try:
                self.wait_actor(label, self.start_timeout_s)
            except Exception as e:  # noqa: BLE001 - an actor that never starts grades nothing
                exit_why = f"{label} never became ready ({type(e).__name__}: {_short(e)})"
                return
            while not stop.is_set():
                with cond:
                    # An idle actor waits: a batch lost elsewhere may come back until grade() is over.
                    while not todo and not stop.is_set():
                        cond.wait(timeout=0.5)
                    if stop.is_set() or not todo:
                        return
                    batch = [todo.popleft() for _ in range(min(self.workers_per_actor, len(todo)))]
                with self._lock:
                    self._in_flight[label] = [j.request.attempt_id for j in batch]
                t0 = time.monotonic()
                open_jobs = {j.request.attempt_id: j for j in batch}
                try:
                    for text in self._run_batch(handle, batch):
                        result = GradeResult.from_json(text)
                        job = open_jobs.pop(result.attempt_id, None)
                        if job is None:
                            continue
                        events.put(("item", GradedItem(result, job.retries, label, job.lost_s)))
                        with self._lock:
                            self._in_flight[label] = list(open_jobs)
                    if open_jobs:
                        raise _ActorLost(f"{label} ended its batch without {len(open_jobs)} verdict(s)")
                except Exception as e:  # noqa: BLE001 - whatever ended the batch, its open attempts go back
                    self._requeue(list(open_jobs.values()), label, f"{label}: {type(e).__name__}: {_short(e)}",
                                  time.monotonic() - t0, todo, cond, events, max_retries)
                    if not self._recovered(label):
                        exit_why = f"{label} is gone ({type(e).__name__}: {_short(e)})"
                        return
                finally:
                    with self._lock:
                        self._in_flight[label] = []
        finally:
            events.put(("exit", exit_why))

    def _run_batch(self, handle, batch: list[_Job]) -> Iterator[str]:
        import ray

        deadline = time.monotonic() + max(j.request.timeout_s for j in batch) + self.grace_s
        texts = [j.text for j in batch]
        if self._client:
            ref = handle.grade_list.remote(texts)
            try:
                yield from ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                ray.kill(handle, no_restart=False)
                raise _ActorLost(f"no answer within {deadline:.0f} s; actor killed for a restart") from None
            return
        gen = handle.grade_stream.options(num_returns="streaming").remote(texts)
        while True:
            ready, _ = ray.wait([gen], timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                ray.kill(handle, no_restart=False)
                raise _ActorLost("silent past the batch deadline; actor killed for a restart")
            try:
                ref = next(gen)
            except StopIteration:
                return
            yield ray.get(ref)

    def _recovered(self, label: str) -> bool:
        """After a loss: True once the actor (restarted by Ray, or still alive) answers again."""
        try:
            self.wait_actor(label, self.start_timeout_s)
            return True
        except Exception:  # noqa: BLE001 - restarts exhausted, node gone, or never came back
            return False

    def wait_actor(self, label: str, timeout_s: float) -> dict[str, Any]:
        """Wait for one actor to answer (through a restart); ActorDiedError once Ray gave up on it."""
        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                info = ray.get(self.handles[label].ready.remote(), timeout=max(1.0, deadline - time.monotonic()))
                self.info[label] = info
                return info
            except ray.exceptions.ActorUnavailableError:
                # Restarting (or briefly unreachable): Ray refuses calls until it is up again.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _requeue(self, jobs: list[_Job], label: str, why: str, spent_s: float, todo: collections.deque,
                 cond: threading.Condition, events: queue.Queue, max_retries: int) -> None:
        with cond:
            for job in reversed(jobs):
                job.why.append(why)
                job.lost_s += spent_s
                if job.retries >= max_retries:
                    events.put(("item", self._exhausted(job, max_retries, label)))
                else:
                    job.retries += 1
                    todo.appendleft(job)  # front of the queue: the oldest work finishes first
            cond.notify_all()

    def _exhausted(self, job: _Job, max_retries: int, label: str | None = None) -> GradedItem:
        """The infra_error verdict of an attempt no actor could finish (stamped with the last actor's hardware)."""
        req = job.request
        fp = self.info.get(label or "") or next(iter(self.info.values()), {})
        reason = (f"grading lost {len(job.why)} time(s) with max_retries={max_retries}: "
                  + " | ".join(job.why))[:2000]
        result = GradeResult(
            attempt_id=req.attempt_id, task_id=req.task_id, task_revision=self._revision(req.task_id),
            grader_version=GRADER_VERSION, status=Status.INFRA_ERROR, reason_code=Reason.INFRA, reason=reason,
            reward=reward(Status.INFRA_ERROR, []), seed=req.seed, profile=req.profile,
            device=fp.get("device", "unknown"), fingerprint_id=fp.get("fingerprint_id", "unknown"),
            fingerprint=fp.get("fingerprint", {}), sharing=req.sharing)
        return GradedItem(result, job.retries, "", job.lost_s)

    def _revision(self, task_id: str) -> str:
        # The revision the actors would have stamped; the catalogue is plain Python, cheap to load here.
        if self._revisions is None:
            try:
                from grader.catalogue import load_catalogue

                self._revisions = {k: c.revision for k, c in load_catalogue(self.catalogue_extra).items()}
            except Exception:  # noqa: BLE001 - a driver without the catalogue still reports the loss
                self._revisions = {}
        return self._revisions.get(task_id, "unknown")


def _short(e: BaseException, n: int = 300) -> str:
    return " ".join(str(e).split())[:n]
