"""Reference answers kept across attempts of a task, and which calls of a size are verified (grader 0.18.0).

A verification compares a call's output with the float64 answer the task's sandboxed reference computes for the
call's seed. Until 0.18.0 every grade drew every seed fresh, so every answer was computed once, inside a check
window that held every slot's timed calls off (H200 run 59: 2,479 answers of 44.8 ms, the largest single use of the
device lock's draws), and thrown away. Now:

1. Per task and size, the service keeps a pool of secret seeds (`AnswerPool`), drawn from the OS when first asked
   for and never shown to a candidate. The answer of a pool seed is kept in page-locked host memory (float64,
   under a byte budget, those that save least per byte dropped first), so a later attempt of the task is verified
   on it without the reference: one copy onto the device at the copy engine's speed, and the comparison. (Kept in the
   service's device memory instead, 12 GiB of answers left an honest attempt out of memory on H200 run 65.) A
   computed answer is copied into the pool from the reference's arena on the host, once its check window is given
   back (`session._reference`): copied back from the device inside the window, it made each computed answer's hold
   95 ms against the worker's own 54 ms (H200 run 66). It is copied only while another attempt at its task waits in
   the grading's queue, and only if the pool would keep it (`AnswerPool.admit`; `GraderService(answers_for_waiting)`,
   on since H100 runs 149-150: in run 148 those copies were 8% of round 1's slot time).
2. Per size of an attempt, `SeedPlan` says which seed each call takes. The check calls take pool seeds. Each call
   the timing loop can make gets a secret uniform priority; the verified timed calls are the `n` made calls of
   lowest priority. That is a uniformly random choice among the calls made, whatever their number, as the choice
   after the loop was before. The calls a loop of `min_reps` pairs makes take pool seeds too, those of lowest
   priority the seeds whose answers are kept: a size timed for `min_reps` pairs (most of them) is verified on kept
   answers only. Every other call takes a fresh seed, derived from the grade's root seed as before.
3. No pool seed is used twice in one attempt, so no input repeats within it (threats 12 and 13). A pool seed's
   inputs come from the same generator as a fresh seed's: the candidate cannot tell which calls may be verified.
   Across attempts nothing of one reaches the next (its own worker, scratch, namespaces and arena; device memory a
   process freed reaches no next process: tests/grader/test_device_memory_scrub.py, H200 run 61), so a candidate
   cannot recognise inputs it was given before. The seeds are written in the grade's record once it is done.
"""
from __future__ import annotations

import heapq
import math
import secrets
import threading
from dataclasses import dataclass

POOL_SEEDS = 32
"""Seeds per task and size: enough for the check calls and every call of a loop of `min_reps` pairs (2 + 2 + 10 + 1
on a GPU since H100 run 93, 2 + 2 + 20 + 1 before), and of longer loops."""

ANSWER_BUDGET_BYTES = 2 << 30
"""Memory the kept answers may hold in all, on a host grading on its CPU."""

PINNED_ANSWER_BUDGET_BYTES = 12 << 30
"""The same on a GPU host, page-locked (the H200 host has 128 GiB). Run 65 kept 146 answers in 12 GiB and still
dropped 454 of 600: the acceptance mix's outputs are up to 256 MiB of float64 each."""


def budget_for(device: str) -> int:
    """The kept answers' byte budget for a service grading on `device`."""
    return PINNED_ANSWER_BUDGET_BYTES if device.startswith("cuda") else ANSWER_BUDGET_BYTES


def kept_copy(t):
    """`t` (an answer on the device, or None) copied into host memory, page-locked where there is a GPU: what the
    pool keeps of an answer that came through a memfd (past the arena's size); one from the arena is copied on the
    host (`wire.Arena.read(pin=True)`)."""
    if t is None or t.device.type == "cpu":
        return t
    import torch

    host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
    host.copy_(t)
    return host


@dataclass(frozen=True)
class Answer:
    """A reference's answer for one seed, in host memory (`kept_copy`): the float64 (or integer) output, the error scale when the
    card has one, and the digest of the inputs the task's own `get_inputs()` made for the seed (None otherwise)."""

    ref: object
    scale: object | None
    digest: str | None

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.ref, self.scale) if t is not None)


def _per_byte(cost_s: float, nbytes: int) -> float:
    """What keeping an answer saves per byte: its cost (at most a minute) over its bytes; NaN or nothing: the least."""
    return (min(cost_s, 60.0) if cost_s > 1e-6 else 1e-6) / max(nbytes, 1)


class AnswerPool:
    """The service's kept answers, shared by its slots (thread-safe). Keys: a task (`task_id@revision`) and a size
    (`size_key`); the device is the service's one.

    Which answer goes when the budget is full: the one whose keeping saves the least device time per byte
    (greedy-dual-size: each answer's priority is the pool's age plus what computing it cost over its bytes, refreshed
    at each use; the age rises to each dropped answer's priority, so an answer nobody uses falls behind, and of
    equals the least recently used goes). H200 run 66 kept answers least recently used first: 1,827 of 1,931
    computed were dropped, and 59 used. Its answers are 0.1-512 MiB, and a small one costs the device about what a
    large one does (a reference's round trip is mostly its host work). `bench/answer_reuse.py` replays that run's
    grades: 0 answers used in its second round least recently used first, 294 of 1,230 this way."""

    def __init__(self, seeds_per_size: int = POOL_SEEDS, budget_bytes: int = ANSWER_BUDGET_BYTES):
        self.seeds_per_size = seeds_per_size
        self.budget_bytes = budget_bytes
        self._lock = threading.Lock()
        self._seeds: dict[tuple[str, str], list[int]] = {}
        self._answers: dict[tuple[str, str, int], Answer] = {}
        self._worth: dict[tuple[str, str, int], tuple[float, float, int]] = {}  # key -> (priority, per byte, turn)
        self._heap: list[tuple[float, int, tuple[str, str, int]]] = []  # (priority, turn, key): lowest first; an
        self._turn = 0                                                   # entry of another turn than its key's is stale
        self._age = 0.0
        self.held_bytes = 0
        self.kept = self.computed = self.dropped = self.unwanted = 0

    def order(self, task: str, size: str, rng) -> list[int]:
        """The size's pool seeds for one attempt: those with a kept answer first, each part in an order of `rng`
        (the grade's secret generator)."""
        with self._lock:
            seeds = self._seeds.get((task, size))
            if seeds is None:
                seeds = self._seeds[(task, size)] = [secrets.randbits(63) for _ in range(self.seeds_per_size)]
            kept = [s for s in seeds if (task, size, s) in self._answers]
            rest = [s for s in seeds if (task, size, s) not in self._answers]
        rng.shuffle(kept)
        rng.shuffle(rest)
        return kept + rest

    def get(self, task: str, size: str, seed: int) -> Answer | None:
        key = (task, size, seed)
        with self._lock:
            got = self._answers.get(key)
            if got is not None:
                self._rank(key, self._worth[key][1])
                self.kept += 1
            return got

    def admit(self, task: str, size: str, seed: int, nbytes: int, cost_s: float = 1.0, wanted: bool = True) -> bool:
        """Whether an answer of `nbytes` would be kept now (`put`), asked before it is copied into page-locked memory:
        when not, it is counted as computed and not kept, as `put` would count it, and nothing is copied. `wanted`
        False (no attempt of its task waits to be graded: `GraderService(answers_for_waiting=True)`): never. H100 run
        148's round 1 computed 622 answers, verified on a kept one 45 times, and the copies were 8% of the slots'
        time; 397 of the 622 came from a task's last attempt in the round."""
        key = (task, size, seed)
        with self._lock:
            if not wanted:
                self.computed += 1
                self.unwanted += 1
                return False
            if nbytes > self.budget_bytes or key in self._answers:
                self.computed += 1
                return False
            per_byte = _per_byte(cost_s, nbytes)
            out = self._victims(self.held_bytes + nbytes - self.budget_bytes, per_byte)
            if out is None:
                self.computed += 1
                return False
            for back in out:  # the room is there: `put` takes it (or, if others took it meanwhile, decides again)
                heapq.heappush(self._heap, back)
            return True

    def put(self, task: str, size: str, seed: int, answer: Answer, cost_s: float = 1.0) -> None:
        """Keep `answer`, which took `cost_s` of the device's lock to compute, dropping others beyond the budget (see
        the class). An answer larger than the whole budget is not kept; nor one worth less than what would have to
        go to make room for it, and then nothing goes."""
        key, nbytes = (task, size, seed), answer.nbytes
        with self._lock:
            self.computed += 1
            if nbytes > self.budget_bytes or key in self._answers:
                return
            per_byte = _per_byte(cost_s, nbytes)
            out = self._victims(self.held_bytes + nbytes - self.budget_bytes, per_byte)
            if out is None:
                return
            for priority, _, old in out:
                self.held_bytes -= self._answers.pop(old).nbytes
                del self._worth[old]
                self._age = max(self._age, priority)
                self.dropped += 1
            self._answers[key] = answer
            self.held_bytes += nbytes
            self._rank(key, per_byte)

    def _victims(self, need: int, per_byte: float) -> list | None:
        """(Under the lock.) The heap entries to drop for `need` more bytes, popped, for an answer worth `per_byte`;
        None when one of them is worth more than it: then they are all back, and the answer counts as dropped (the
        pool's age rises by its worth, as a dropped answer's priority does)."""
        out = []
        while need > 0:  # held answers make up more than `need`: the heap is not empty before it is met
            entry = heapq.heappop(self._heap)
            live = self._worth.get(entry[2])
            if live is None or live[2] != entry[1]:
                continue  # stale: used since, or dropped
            if entry[0] > self._age + per_byte:  # worth more than this one: keep them all, drop this one
                for back in out + [entry]:
                    heapq.heappush(self._heap, back)
                self._age += per_byte
                self.dropped += 1
                return None
            out.append(entry)
            need -= self._answers[entry[2]].nbytes
        return out

    def _rank(self, key: tuple[str, str, int], per_byte: float) -> None:
        """(Under the lock.) `key`'s priority now: the pool's age plus its worth per byte; the newest of equals goes
        last. The heap is rebuilt once stale entries outnumber live ones."""
        self._turn += 1
        priority = self._age + per_byte
        self._worth[key] = (priority, per_byte, self._turn)
        heapq.heappush(self._heap, (priority, self._turn, key))
        if len(self._heap) > 2 * len(self._worth) + 64:
            self._heap = [(p, turn, k) for k, (p, _, turn) in self._worth.items()]
            heapq.heapify(self._heap)

    def stats(self) -> dict:
        with self._lock:
            return {"answers_kept_used": self.kept, "answers_computed": self.computed, "answers_dropped": self.dropped,
                    "answers_unwanted": self.unwanted, "answers_held": len(self._answers), "held_bytes": self.held_bytes}


class SeedPlan:
    """Which seed each call of one size of one attempt takes, and which timed calls are verified.

    `order`: the pool's seeds for this attempt (`AnswerPool.order`; empty without a pool). `check_calls` of them go
    to the check calls. Each of the `positions` calls the timing loop can make (warm-up, timed and traced calls, in
    the order they are made) gets a secret uniform priority from `rng`; the first `pooled` positions (the calls a
    loop of `min_reps` pairs makes) take the remaining pool seeds, in order of priority."""

    def __init__(self, order: list[int], check_calls: int, positions: int, pooled: int, rng):
        self.check = order[:check_calls]
        self.priority = [rng.random() for _ in range(positions)]
        rest = order[check_calls:]
        first = sorted(range(min(pooled, positions)), key=self.priority.__getitem__)
        self.calls = dict(zip(first, rest))
        self.pool = frozenset(self.check) | frozenset(self.calls.values())

    def check_seed(self, i: int) -> int | None:
        """The pool seed of check call `i`, or None (a fresh one)."""
        return self.check[i] if i < len(self.check) else None

    def call_seed(self, position: int) -> int | None:
        """The pool seed of the loop's call at `position`, or None (a fresh one)."""
        return self.calls.get(position)

    def verified(self, made: int, n: int) -> list[int]:
        """The positions of the `n` calls, of the first `made`, to verify: those of lowest priority, a uniformly
        random choice. A position past the priorities drawn (never, with `positions` the loop's most calls) ranks
        last."""
        rank = lambda k: self.priority[k] if k < len(self.priority) else math.inf  # noqa: E731
        return sorted(range(made), key=rank)[:n]
