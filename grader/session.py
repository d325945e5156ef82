"""The sealed parent's grade of one attempt: plan the calls, verify, time, decide.

The worker only runs the candidate. Everything that decides the verdict is here: the inputs are
re-drawn from the seed on this side, the float64 reference and the expert run here, outputs are
fetched and compared here, and timed outputs are verified on a sample chosen after the calls.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import math
import os
import random
import secrets
import select
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from grader import compile_cache, guard, hangwatch, sandbox, wire
from grader.compare import EXPERT_SLACK, Verdict, check_output_meta, compare, expert_slack
from grader.contract import (GRADER_VERSION, SPEEDUP_CLIP, GradeRequest, GradeResult, Reason, SizeResult, Status,
                             clip_speedup, geomean, reward)
from grader.answers import Answer, AnswerPool, SeedPlan, kept_copy
from grader.devicewatch import is_full
from grader.inputs import derive_seed, make_inputs, resolve_specs
from grader.launcher import GatedCall, Slot, WorkerConn, let_through_together
from grader.statics import (declared_kernels, literal, declared_triton_kernels, host_compute, library_kernels,
                            ran_own_kernel, static_findings)
from grader.taskcard import (DTYPE_BYTES, STRUCTURAL_OPS, TaskCard, bytes_floor, pytorch_allowed, resolve_shape,
                              size_key)
from grader.timing import median, median_ci, quantile


@dataclass(frozen=True)
class Effort:
    """How much evidence a grade gathers per size (the stated confidence target lives here)."""

    check_calls: int = 2
    """Fully verified calls per size (inputs and output fetched)."""
    warmup_pairs: int = 2
    """Untimed (expert, candidate) pairs that open each size's timing: the clocks ramp up and the
    switch between the two workers' device contexts settles before anything counts."""
    min_reps: int = 10
    """Timed pairs a size makes before its interval may end it. 20 until H100 run 93 (2026-12-05): replayed on the
    pairs of runs 81 and 86, 10 pairs and a half-width of 0.015 (below) made 57-64% of the pairs with the repeats'
    median at 0.0059 in both; run 93 graded with them, every cheat and escape floored, no honest kernel floored or
    stopped at the clip, repeats median 0.0052 (p95 0.0199) against the goal of 0.01, 11 pairs a size at the median
    against 21 (`docs/call-boundary.md`, "Fewer timed pairs")."""
    max_reps: int = 150
    clip_reps: int = 5
    """Pairs after which a size stops timing when its whole interval lies below the clip (`beyond_clip`): its
    clipped speedup is then known, and more pairs of a candidate hundreds of times slower than the expert would
    only hold the device (H200 run 39: such loops held the other slots' check work off for seconds). Not fewer:
    every clip stop of H200 runs 44-50 had calls let through their gates, and an honest kernel's first pairs at a
    size can all be (run 50: 0.16 ms calls timed at 20-25 ms, two pairs in a row)."""
    give_way_s: float = 0.5
    """A timing loop gives way to waiting check work after any pair once it has held the device this long since it
    came in or last gave way (`DeviceLock.give_way`); 0: never. Until 0.14.0 it was every 4 pairs, which a slow
    candidate's loop took seconds to reach (H200 run 46: 7 pairs of 0.6 s calls before anyone else's check work).
    Each way given costs the loop a phase of check work (H200 run 49, at 0.05 s: 1,045 ways given, 0.74 s each), and
    each wait of check work costs about half a loop phase: a size with T s of loops and k waits of check work, in
    phases of S s, waits least when loops hold the device sqrt(2 T S / k) at a time (T 0.9, S 0.7, k 2: 0.8 s)."""
    slow_loops: bool = True
    """A candidate slow at a size, whose last check call and warm-up call each ran at least `SLOW_CALL_MS` on the
    device, gets one warm-up pair (its own calls warm the device), and its size is done after a single timed pair,
    its call slow too and neither let through its gate, past the clip by `ONE_PAIR_CLIP_MARGIN_LOG2` (0.14.0;
    bench/gpu_acceptance.py --without slow_loops). One slow call is no evidence: an honest kernel's first call at a
    size can wait 20 ms for its memory (H200 run 50)."""
    slow_checks_warm: bool = True
    """`slow_loops` from the check calls alone: a candidate two of whose check calls at a size each ran at least
    `SLOW_CALL_MS` of their own device work (not the attempt's compiling first call, which times the compiler, nor one
    let through its gate, which times its host's waits) gets no warm-up pair there: those calls warmed the device. Its
    timed pairs follow, of which one past the one-pair bound still ends the size (`one_pair_ends_size`: that pair is
    timed alone on the device, so check calls slowed by other slots' work beside them cost a fast kernel its warm-up
    pairs only, never its timing). H200 run 123: the five grades of round 1 stopped at the clip took 19% of its slot
    time, each slow size making five calls (two check calls, the warm-up pair's, the timed pair's, the traced call).
    H100 run 126 (ABAB, round 1, 6 slots) measured a first version, which also counted the compiling first call (and
    so skipped the first size's warm-up pair too): 2,580 and 2,257 per GPU-hour with it against 2,439 and 2,160, the
    grades stopped at the clip 17.6 and 20.8 s of slot time at the median against 22.8 and 25.1. On since grader
    0.22.0: the acceptance with it and `start_ahead`, H200 run 128 (8 slots), held every figure (12/12 cheats in 3 of
    3 grades, 0/48 honest kernels floored, repeats median 0.0074, p95 0.0306); `--without slow_checks_warm`."""
    check_windows: bool = True
    """Each piece of check work (a check call, a verification's fetch, its inputs, the reference's answer, the
    comparison, the expert's warm-up) runs in a window of its own beside the timing loops (`DeviceLock.check`): never
    beside a timed call's device interval or an exclusive loop, and never waiting for a loop's whole phase (0.15.0;
    --without check_windows). Off, a size's check calls, their verifications and the expert's warm-up share one
    shared hold (0.14.0), and check work and the loops take turns in phases: H200 run 50 spent 138.5 s of the lock
    shared and 189.3 s in loops, the device idle in most of both; a size's shared hold waited 1.83 s for the loops to
    give way. Either way the expert's worker starts before the size's first hold, and the timed outputs are verified
    in the timing loop's own hold. (Until 0.14.0 each check call and verification took a shared hold of its own, and
    the expert's warm-up went through its gate, which stalled it 3.3-3.8 s a call: H200 runs 46 and 48.) The
    expert's first call at a size in its worker compiles its kernels (H200 run 50: 251 ms a call on average) and
    holds nothing, as the attempt's first call does: the expert's code is the catalogue's, and in a window it would
    hold every slot's timed calls off while it compiles."""
    target_log2_halfwidth: float = 0.015
    """Stop timing a size once the ~95% interval of log2(speedup), from the paired calls, is at
    most this far either side of its median (0.01 until H100 run 93: see `min_reps`)."""
    verify_timed: int = 4
    """Least timed calls per size whose outputs are fetched and verified, chosen after the calls."""
    verify_fraction: float = 0.05
    """...and at least this share of them, so a candidate that turns bad after N calls is caught."""
    late_tolerance_ms: float = 0.002
    """Done-gap excess over the twin's (see `late_excess`) below which nothing is charged."""
    size_budget_s: float = 1.0
    """Wall-clock cap on one size's timing loop."""
    kept_output_bytes: int = 4 << 30
    """Device memory the candidate's kept timed outputs may hold at once (bounds reps at huge sizes)."""
    draw_before_gate: bool = True
    """A timed call's inputs are drawn and synchronised before its launch gate closes (0.10.0, and again since
    0.12.0); off: drawn behind the closed gate (0.11.0). Behind the gate, an allocation that waits for the device
    (a cached block freed, or a fresh cudaMalloc) waits for the gate too, and the call stalls: H200 run 41 drew
    24 ms a call for one expert copy, whose stalled calls then timed the host's launch gaps and scored -0.875
    against itself (bench/gpu_acceptance.py --without draw_before_gate)."""
    fill_behind: bool = True
    """A timed call of an interleaved loop allocates its inputs before its launch gate closes and draws them behind
    it, in its own device window, so it takes no draw window at all (0.18.0; bench/gpu_acceptance.py --without
    fill_behind). H200 run 62: the loops' 23,121 draw windows held some draw 211 of 312 s, about 9 ms each for 1 ms
    of the worker's, and every device window waited for the draws in flight. Nothing behind the gate allocates
    (`grader.inputs.plan_inputs`), so nothing there waits for the device as run 41's draws behind the gate did.
    A task's own inputs (`inputs_from: task`) come from the host and are drawn before the gate as ever."""
    reference_first: bool = True
    """The task's reference worker starts before a size's check calls take the device lock; off: inside it."""
    split_window: bool = True
    """A timed call of an interleaved loop holds the device alone only from its gate's opening to "done"; its
    draw runs beside other draws, and its launch in no window (0.13.0). Off: one window from its message to
    "done", so no other worker's gate is ever closed during it (0.11.0 and 0.12.0; bench/gpu_acceptance.py
    --without split_window)."""

    paired_windows: bool = True
    """A timed pair's two calls, each queued behind its closed gate at once, are let through one after the other in
    one device window (`launcher.let_through_together`, `_timed_pair`), not in a window each: a loop waits for one
    window a pair, and its twin's launch overlaps its candidate's. The candidate goes first and is read whole inside
    the window, so nothing its process queued runs beside its twin's timed call (ABAB; off, the loop's pairs go
    ABBA). Needs `split_window` and `fill_behind` (bench/gpu_acceptance.py --without paired_windows). H200 run 69
    measured it with ABBA pairs, run 70 without it; H200 runs 71 and 72 the candidate-first pair with and without it:
    throughput the same (1,916 against 2,006 per GPU-hour over every round), the repeats' p95 0.0185 against 0.0259."""
    gated_reference: bool = True
    """The reference's answers at a size after its first go through its worker's launch gate, so their check window
    holds the answer's device work alone, not the worker's host work; a reference written here only (`SealedTask.ours`,
    since 0.21.3: `session._gates_answer`). H200 run 66: 95 ms a computed answer's hold, 54 of them the worker's own.
    On since grader 0.23.0, with `warmup_release` and `keep_size_memory` (H100 runs 132 and 133,
    `contract.GRADER_VERSION`); `--without gated_reference`."""
    host_verify: bool = False
    """A verification compares on the host (`session._verify`): the candidate's output, the reference's answer and a
    kept answer are read out of their page-locked arenas into this process's memory, not copied onto the device, and
    compared there in cache-sized pieces (`compare.CHUNK`, one thread). Only the device work takes a window: the
    worker's copy into its arena, the reference's run, the inputs drawn again, the expert's call for its slack; a
    kept answer and the comparison take none (on the CPU, whose device is the host, that is all it changes). H200
    run 71: some draw held the device 193.6 of 344 s, and a device window waited on draws 157.4 s; verifications hold
    most draws (fetch 24 ms, reference 62 ms, compare 13.5 ms a piece), and of those the answer's copy onto this
    device (13.9 ms), the output's and the comparison are this process's own device work. Off: H100 run 76 measured
    it slower than run 75 without it on the same card (1,431 against 1,852 per GPU-hour over every round): the inputs
    drawn again and copied out held check windows of 112 ms (35% of the device windows' wait on draws), and the
    parent's comparisons took 2.16 of its cores at the median against 0.48 (the acceptance's `--with host_verify`)."""
    hang_watch: bool = True
    """The attempt's load and its first call, the two that may compile, end as a timeout once the worker's threads
    have moved none of the kernel's counts of work for `hang_idle_s` (`grader.hangwatch`: no page fault, read,
    write, switch by turns, child at work), a spin or a wait nothing ends, not only at the attempt's budget. H100 run
    136: the demo's one hang in round 1 (a spin in its call) held its slot 60.2 s, 15% of round 1's slot time, and
    round 1 cannot end sooner than its longest grade. Each grade it watched records what it saw
    (`sandbox["hang_watch"]`). On since grader 0.24.0: in the acceptance with it (H100 run 138) the hang ended in
    13.1 s, and none of the 582 other requests it watched had a reading equal to the one before, let alone 10 s of
    them; every figure held (`--without hang_watch`)."""
    first_call_early: bool = False
    """At the grade's first size, the attempt's first call (which compiles, and holds nothing) comes before the wait
    for the task's reference worker (`reference_first`), not after it: that worker, started as the grade begins
    (`start_ahead`), boots beside the attempt's load and its first call instead of before the call. Not where the task
    makes the inputs (its worker draws them). H100 run 140: the slots waited for a task's worker 180 s over every
    round, 10.3% of their time (103 task workers started, 2.1 s each to loaded), and the attempt's first call took
    0.72 s at the median. H100 run 142, the acceptance with it: every figure held, the waits took 107 s against 180,
    but that machine ran every part slower, so its rate wants an ABAB (`bench/gpu_acceptance.py --with
    first_call_early`)."""
    expert_early: bool = False
    """The expert's first call at a size in its worker (which compiles its kernels there, holding nothing) is sent
    before the size's first check call and read back before its worker is asked anything else (the reference's
    answer for that call's verification), so that it compiles beside the candidate's call instead of after the
    size's check calls (`_expert_early`; not at a size whose worker `first_call_early` has not waited for yet, nor
    where the task makes the inputs, which its worker draws). Only the first check call's device time can see the
    expert's kernels beside it; the size's fastest check call and its last, which the clip's witness and
    `slow_checks_warm` read, come after. H100 run 142: 344 such calls, 339 ms a round trip (117 of its 1,836
    slot-seconds), beside a size's first check call of 222 ms (`bench/gpu_acceptance.py --with expert_early`)."""
    hang_idle_s: float = 10.0
    """How long the watched worker must move no count of work (`hang_watch`). In H100 run 138 no honest load or first
    call read the same twice in a row (0.2 s apart); the attempt's first call took 0.73 s at the median in run 136,
    compilation included."""
    start_ahead: bool = True
    """The task's reference and expert workers, where the slot keeps none alive, start as the grade begins, beside
    the candidate's start and load (`session._start_ahead`), not one after the other in its first size. With two
    kept workers a task, H200 run 73 measured it slower than run 71 without it (1,774 against 1,916 per GPU-hour),
    its boots longer the more ran at once (reference 11.0 s, expert 11.2 s at the median, against 7.0 and 5.0). With
    `task_workers` (one worker a new task) and 6 slots, H100 run 127 (ABAB, round 1, with `slow_checks_warm` on both
    sides) graded 2,752 and 2,682 per GPU-hour with it against 2,566 and 2,537, each grade 8% shorter though each task
    worker's CUDA start took 1.1-1.2 s against 0.85. On since grader 0.22.0, after the acceptance with both held every
    figure (H200 run 128); `--without start_ahead`."""
    gated_check_calls: bool = True
    """A check call goes through the candidate's launch gate (not the attempt's first call, which holds nothing): a
    check place (`DeviceLock.check(whole=False)`) and in it two draw windows, its preparation up to its closed gate
    and its gate's opening up to its reply, read whole inside it (`WorkerConn.request(read_whole=True)`: the inputs
    it keeps are copied and the interpreter checked before the window is given back). Its launch holds no window,
    where a size's first call compiles a kernel specialised on the size, and its gate stays closed for up to
    `CHECK_PATIENCE_S` (a size's first) or `LATER_CHECK_PATIENCE_S`. Off, each check call is one check window
    whole: H100 run 75, a size's first 286 of 138 ms (112 ms of them the call's), 23% of the device windows' wait on
    draws, and the later ones 409 of 37 ms, 6%. H200 runs 79 (with it and `settled_pairs`) and 80 (without both),
    one card, graded round 1 in 150 s each, where the slots bound. On since grader 0.20.0: where the lock binds (6
    slots, one H100), round 1's first minute graded 2,193 and 2,198 per GPU-hour with both against 2,069 and 2,064
    without (run 103, ABAB), and the acceptance with both held every cheat, escape and precision figure (run 102)
    (bench/gpu_acceptance.py --without gated_check_calls)."""
    settled_pairs: bool = True
    """In a timed pair's device window (`paired_windows`), the twin's gate opens once the candidate's worker says
    "settled" (the device synchronised again after "done", its call's thread ended), not once it has replied whole:
    the candidate's interpreter check (3.2 ms of run 78's calls, a median of the sizes' medians) and its reply run
    beside the twin's call instead of inside the window. What that check could find running (a thread, a hook) would
    run there beside the twin either way; a change it finds floors the attempt, whose pairs then count for nothing.
    On since grader 0.20.0 with `gated_check_calls` (H100 runs 102 and 103, there) (bench/gpu_acceptance.py
    --without settled_pairs)."""
    keep_size_memory: bool = True
    """A kept worker (a task's expert or reference) moving to another size keeps its cached device memory while the
    device has room (`KEEP_MEMORY_BELOW`, one NVML reading as it moves: `_room_to_keep`), so that the blocks of the
    sizes it worked at before serve its next answers at them; with less room it gives them back as before (`_trim`).
    A candidate's worker always gives them back. H100 run 102: a reference's answer at a size new to its worker took
    51.8 ms a round trip (inputs 14.4, run 26.0; 587 of them) against 16.3 (0.4, 4.3; 2,189) at the size it was at,
    and such answers held check windows and loop draws 33.4 holder-seconds, 13.7 s of the device windows' wait on
    draws (21%); its 2,032 trims took 77.8 s of slot time in no window. Each kept worker then holds the blocks of
    every size of its task, and a dozen slots' workers doing so ran an H200 out of memory (runs 65 and 66), which is
    what the threshold is for. H100 run 107 (ABAB, 96 demo attempts) graded 2,544 and 2,772 per GPU-hour with it
    against 2,652 and 2,748 without; the device read under the threshold for 26-29 of a run's ~240 moves, so a
    reference's answer at a new size kept its cost (65-75 ms a round trip either way). On since grader 0.23.0, with
    `gated_reference` and `warmup_release` (H100 runs 132 and 133, `contract.GRADER_VERSION`);
    `--without keep_size_memory`."""
    warmup_release: bool = True
    """A warm-up pair's calls hold their draw windows only up to their workers' "released" (the call over, the device
    synchronised again), as `traced_release`'s traced call does: the observation's record of the call and the
    interpreter's check run in no window. H200 run 123: warm-up calls held draws 36.8 of their 188 holder-seconds,
    14.3 ms each, and device windows waited 11.6 s on them. On since grader 0.23.0, with `gated_reference` and
    `keep_size_memory` (H100 runs 132 and 133, `contract.GRADER_VERSION`); `--without warmup_release`."""
    traced_release: bool = True
    """A size's traced call holds its draw window only up to its worker's "released" (the call over, the device
    synchronised again: `WorkerConn.request(released=...)`), not up to its reply: the device's session closes (its
    kernels' records read) and the interpreter is checked in no window. H200 run 80: 112 traced calls held draws of
    219 ms at the mean, 126 ms of them that close, and held off device windows longest of any draw (17.1 s, 25% of
    their wait on draws). H200 runs 82 and 83, one card, round 1: its draws held 7.3 holder-seconds against 19.0, and
    device windows waited on them 3.0 s against 11.8; round 1 took 121 s against 120 (the slots bound it, not the
    lock). Run 81 graded every round with it on: every cheat and escape floored, no honest kernel
    (bench/gpu_acceptance.py --without traced_release)."""
    stalled_one_pair: bool = True
    """`slow_loops`' one-pair stop also for a pair whose candidate's call was let through its gate (stalled, so timed
    with its host's waits), when that call less `STALL_ALLOWANCE_MS` still lies past the clip by
    `ONE_PAIR_CLIP_MARGIN_LOG2`, and the size's fastest check call past it too (`clip_witnessed`). H200 run 80: all 20
    sizes stopped at the clip had every one of their 5 pairs let through, each size's pairs within 0.3 of each
    other in log2, and their pairs held 16.5 s of device windows; 9 of them lay past the stop with the allowance.
    H200 run 83: 6 sizes ended at one pair, and device windows held the device 25.1 s against run 82's 31.0 (with
    `traced_release`); run 81: no honest kernel stopped at the clip, 0 of 19 (bench/gpu_acceptance.py --without
    stalled_one_pair)."""
    judge_first: bool = True
    """At the grade's first size, the check calls' records are judged before the timing loop (`_grade_size`): a
    candidate that breaks a rule from its first call holds the device for no loop. Off on the CPU, whose loops of 3
    pairs cost less than the observation's extra close and reopen (4 CPU grades of the softmax card: 6.6 s without,
    7.2 s with it, 8.1 s with it at every size)."""

    @staticmethod
    def for_device(cuda: bool) -> "Effort":
        # CPU sizes are tiny: every timed output is verified there.
        return Effort() if cuda else Effort(check_calls=1, warmup_pairs=0, min_reps=3, max_reps=3,
                                            target_log2_halfwidth=math.inf, verify_timed=3, verify_fraction=1.0,
                                            size_budget_s=2.0, judge_first=False)


BANDWIDTH_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12, "cpu": 1.0e12}
"""Peak memory bandwidth used for the physical floor; datasheet numbers, deliberately optimistic."""


OUTPUT_LOG_CAP = 64 << 20
"""Bytes a worker may print (stdout and stderr go to one log in its scratch, read by nobody); more is a
runtime error, whatever it printed: a flood costs the host disk and the call its time."""


class Floor(Exception):
    """Raised inside a grade to end it at the floor with a status and reason."""

    def __init__(self, status: Status, code: Reason, reason: str):
        super().__init__(reason)
        self.status, self.code, self.reason = status, code, reason


class SealedTask:
    """One card as the sealed parent grades it. Its reference (and error scale) is corpus code: it runs
    only in a sandboxed worker (`Slot.reference`); the expert runs in another (`Slot.expert`), timed exactly
    as candidates are, or, when the two come from one author (`one_author`), both in one (`Slot.task`).
    Nothing of the card is executed in this process."""

    def __init__(self, card: TaskCard, device: str, builds=None):
        self.card = card
        self.device = device
        self.builds = builds
        """The service's builds of the experts' kernels (`grader.expertseed.Builds`), or None."""

    def expert_kernels(self) -> dict[str, bytes] | None:
        """The expert's compiled Triton kernels built ahead for this task so far (`grader.expertseed`), for its kept
        worker to start with; None for a card not written here (`ours`): its worker may run a corpus reference."""
        if self.builds is None or not self.ours:
            return None
        return self.builds.kernels(self.expert_key) or None

    @property
    def expert_key(self) -> str:
        return f"{self.card.task_id}@{self.card.revision}"

    @functools.cached_property
    def one_author(self) -> bool:
        """The card's expert and reference come from one author: an imported task's expert is its reference (its
        own eager model), and a built-in card's are both ours (`catalogue.built_in_revisions`). Only such a task may
        have one worker for both (`Slot.task`): its reference then reaches no code in the twin its author did not
        write."""
        return self.card.expert == self.card.reference or self.ours

    @functools.cached_property
    def ours(self) -> bool:
        """A built-in card as built (`catalogue.built_in_revisions`): its reference and expert were written here, not
        read from a corpus."""
        from grader.catalogue import built_in_revisions

        return built_in_revisions().get(self.card.task_id) == self.card.revision

    @property
    def answer_bytes(self) -> int:
        """Bytes of the reference's largest answer on this device's sizes: float64 (or int64) output and
        error scale (when the card has one), each as big as the output. The arena lent to the reference
        worker is this big; an answer that does not fit takes a memfd of its own."""
        profile = "gpu" if self.device.startswith("cuda") else "cpu"
        most = max((_prod(resolve_shape(self.card.output_shape, s)) for s, _ in self.card.sizes(profile)), default=0)
        return (2 if self.card.error_scale else 1) * (8 * most + 64)

    @property
    def fetch_bytes(self) -> int:
        """Bytes of a candidate's largest fetch on this device's sizes: a check call's output and the input tensors
        kept with it, laid out as `wire` does (64-byte aligned). The arena its worker is lent is this big; a task's
        own inputs are not counted (a fetch that does not fit takes a memfd)."""
        card = self.card
        profile = "gpu" if self.device.startswith("cuda") else "cpu"
        most = 0
        for s, _ in card.sizes(profile):
            parts = [DTYPE_BYTES[card.output_dtype] * _prod(resolve_shape(card.output_shape, s))]
            parts += [DTYPE_BYTES.get(spec["dtype"], 8) * _prod(spec["shape"]) for spec in resolve_specs(card, s)
                      if spec["dist"] != "scalar" and card.inputs_from != "task"]
            most = max(most, sum((n + 63) // 64 * 64 for n in parts))
        return most


EXPERT_TIMEOUT_S = 300.0
"""Start, load and per-call budget of an expert worker (trusted code: a slow first compile is no fault
of the candidate's, so it does not draw on the attempt's own budget)."""


def grade_attempt(req: GradeRequest, task: SealedTask, slot: Slot, *, fingerprint: dict,
                  fingerprint_id: str, device_name: str, gpu_lock, effort: Effort,
                  ext_cache: compile_cache.CompileCache | None = None,
                  build_env: compile_cache.BuildEnv | None = None, watch=None,
                  roles: Callable[[], dict[int, str]] = dict, ahead: dict | None = None,
                  answers: AnswerPool | None = None, waiting: Callable[[], bool] | None = None) -> GradeResult:
    """`ahead`: what building the attempt's extensions ahead of this grade did (grader.buildahead), for the record.
    `answers`: the service's kept reference answers (`grader.answers`): check calls and the calls of a loop of
    `Effort.min_reps` pairs take the pool's seeds. None (`GraderService(answer_pool=False)`): every call takes a
    fresh seed; the verified timed calls are chosen the same way either way. `waiting()`: whether another attempt at
    the task waits to be graded (`GraderService(answers_for_waiting=True)`); if given, a computed answer is copied
    into the pool only while one does, and only if the pool would keep it (`AnswerPool.admit`)."""
    card = task.card
    cuda = slot.device.startswith("cuda")
    profile = req.profile if req.profile != "auto" else ("gpu" if cuda else "cpu")
    phases = {k: 0.0 for k in ("startup", "compile", "correctness", "timing", "expert", "reference", "transfer",
                                "teardown")}
    t_all = time.perf_counter()
    deadline = time.monotonic() + req.timeout_s
    sizes_out: list[SizeResult] = []
    measured: list[float] = []
    sandbox_layers: dict = {}
    g: _Grade | None = None
    status, code, reason = Status.CORRECT, Reason.OK, ""
    root_seed = secrets.randbits(63)  # fresh per grade, never from the request: inputs cannot be precomputed

    def remaining() -> float:
        left = deadline + (g.waited_s if g is not None else 0.0) - time.monotonic()
        if left <= 0:
            raise Floor(Status.TIMEOUT, Reason.TIMEOUT, f"attempt exceeded its {req.timeout_s:.0f} s budget")
        return left

    try:
        if req.language == "cuda" and not cuda:
            raise Floor(Status.UNSUPPORTED_ON_BACKEND, Reason.UNSUPPORTED,
                        "CUDA candidates need a CUDA device; this grader runs on CPU")
        findings = static_findings(req.source, req.language)
        if req.language == "pytorch" and card.pytorch_ops:
            findings += host_compute(req.source, lists=False)
        for finding in findings:
            raise Floor(Status.CHEAT_FLAGGED, finding.code, finding.detail)
        sizes = card.sizes(profile)
        if not sizes:
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"task {card.task_id} has no sizes for profile {profile}")
        if effort.start_ahead:
            _start_ahead(slot, task)
        t = time.perf_counter()
        try:
            conn = slot.spawn(timeout_s=min(remaining(), 300.0), memory_limit_mb=req.memory_limit_mb)
        except (OSError, wire.WireError) as e:
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"worker failed to start: {e}") from None
        g = _Grade(req=req, task=task, conn=conn, slot=slot, effort=effort, remaining=remaining, phases=phases,
                   gpu_lock=gpu_lock, device_name=device_name, seed=root_seed, watch=watch, roles=roles,
                   answers=answers, waiting=waiting)
        sandbox_layers = dict(conn.hello.get("sandbox", {}), launch_gate=conn.hello.get("gate", "off: no CUDA device"),
                              worker="spare" if conn.spare else "spawned")
        try:  # before the candidate's code is loaded, as the gate was
            sandbox_layers["output_arena"] = slot.lend_output_arena(conn, task.fetch_bytes, min(remaining(), 60.0))
        except (OSError, wire.WireError) as e:
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the worker could not be lent its output arena: {e}") from None
        g.own_kernels = (declared_kernels(req.source) if req.language == "cuda"
                         else declared_triton_kernels(req.source) if req.language == "triton" else [])
        phases["startup"] = time.perf_counter() - t
        t = time.perf_counter()
        source, entry = loaded_source(req, card)
        # Only a worker that can neither read nor write the cache (its hello, sent before any
        # candidate code ran, says which layers it entered) is offered entries or heard about builds.
        use = (ext_cache is not None and build_env is not None
               and compile_cache.sealed_from(sandbox_layers, ext_cache.root))
        offer, blob = _offer(ext_cache, source, build_env) if use else ([], b"")
        if ext_cache is not None:  # recorded before the load, so a load that fails or hangs shows it too
            sandbox_layers = dict(sandbox_layers, ext_cache={"sealed": use, "offered": len(offer),
                                                             **({"ahead": ahead} if ahead else {})})
        reply, built, _ = _request(conn, {"op": "load", "source": source, "entry_point": entry, "ext_offer": offer},
                                   remaining, blob, quiet=_quiet(g, "load"))
        _check_guards(conn, reply, slot)
        if ext_cache is not None:  # a failed load's conclusive build failures too: a later grade raises them again
            sandbox_layers["ext_cache"].update(_ext_record(ext_cache, source, build_env, use, offer, reply, built))
            g.build_failed = (sandbox_layers["ext_cache"].get("failed") or [""])[0]
        if not reply.get("ok"):
            raise Floor(Status.COMPILE_ERROR, Reason.COMPILE, _tail(reply.get("error", "")))
        phases["compile"] = time.perf_counter() - t
        for size, hidden in sizes:
            with _part(g, "a size's other work"):  # what no part inside names: trims, the floor check, the record
                sr, m = _grade_size(g, size, hidden, first=not sizes_out and effort.judge_first)
                sizes_out.append(sr)
                if m is not None:
                    measured.append(m)
                with _part(g, "the size's outputs released"):  # and the candidate's garbage collected
                    _request(conn, {"op": "release"}, remaining)
    except Floor as f:
        status, code, reason = f.status, f.code, f.reason
    except (socket.timeout, TimeoutError):
        status, code, reason = Status.TIMEOUT, Reason.TIMEOUT, f"worker gave no answer within the {req.timeout_s:.0f} s budget"
    except wire.FrameError as e:
        status, code, reason = (Status.CHEAT_FLAGGED, Reason.PROTOCOL,
                                f"the worker's channel carried a frame the worker never writes: {e}")
    except wire.WireError:
        status, code, reason = Status.CRASHED, Reason.CRASH, "worker died mid-grade"
    finally:
        t = time.perf_counter()
        if g is not None:
            late = g.conn.drain_audit()
            how = slot.finish(g.conn)
            if status is Status.CRASHED and how == f"exited with code {guard.AUDIT_EXIT}":
                status, code = Status.CHEAT_FLAGGED, Reason.AUDIT_CHANNEL
                reason = "replaced or closed the worker's audit channel while it had a reach to report"
            elif status is Status.CRASHED:
                reason = f"worker died mid-grade ({how})"
            if late and status is not Status.CHEAT_FLAGGED:
                f = _audit_floor(late[0])
                status, code, reason = f.status, f.code, f.reason
        if g is not None:
            g.close_given()
        phases["teardown"] = time.perf_counter() - t
        if g is not None and g.answers_via:
            sandbox_layers = dict(sandbox_layers, reference_answers=g.answers_via)
        if g is not None and g.hang_watched:
            sandbox_layers = dict(sandbox_layers, hang_watch={k: w.record() for k, w in g.hang_watched.items()})
        if slot.task_workers:  # whether the expert it was timed against shared a worker with the reference
            sandbox_layers = dict(sandbox_layers, task_worker=_one_worker(slot, task))
    phases["total"] = time.perf_counter() - t_all
    speedups = [s.speedup for s in sizes_out if s.speedup is not None]
    if status is Status.CORRECT:
        reason = f"correct on {len(sizes_out)} sizes ({sum(s.hidden for s in sizes_out)} hidden); " \
                 f"geomean speedup {geomean(speedups):.3f}x vs the expert"
    return GradeResult(
        attempt_id=req.attempt_id, task_id=card.task_id, task_revision=card.revision, grader_version=GRADER_VERSION,
        status=status, reason_code=code, reason=reason, reward=reward(status, speedups), seed=root_seed,
        profile=profile, device=device_name, fingerprint_id=fingerprint_id, fingerprint=fingerprint,
        sizes=sizes_out, speedup_geomean=geomean(speedups) if status is Status.CORRECT else None,
        measured_speedup_geomean=geomean(measured), phase_seconds=phases,
        tolerances=_tolerances(card, g.slack_used if g is not None else 0.0),
        sandbox=sandbox_layers, sharing=req.sharing,
        kernels_launched=sorted(set(g.kernels))[:200] if g is not None else [],
    )


def loaded_source(req: GradeRequest, card) -> tuple[str, str]:
    """The module text a worker loads for `req`, and its entry point: a KernelBench-style module (`ModelNew`) is
    wrapped into run(*inputs). The extension cache binds its entries to this text (grader.compile_cache), so a build
    ahead of the grade (grader.buildahead) loads the same."""
    if req.entry_point != "ModelNew":
        return req.source, req.entry_point
    from grader.adapters import kernelbench_candidate_source

    if not card.init_inputs:
        raise Floor(Status.UNSUPPORTED_ON_BACKEND, Reason.UNSUPPORTED,
                    f"task {card.task_id} is not a module-style task: its card has no constructor arguments "
                    "for a ModelNew candidate (entry point `run` expected)")
    return kernelbench_candidate_source(req.source, literal(card.init_inputs)), "run"


@dataclass
class _Grade:
    """What one attempt's grade carries from size to size."""

    req: GradeRequest
    task: SealedTask
    conn: WorkerConn
    slot: Slot
    effort: Effort
    remaining: Callable[[], float]
    phases: dict
    gpu_lock: object
    device_name: str
    seed: int
    """The grade's root seed (drawn fresh by grade_attempt); every call's seed derives from it."""
    rng: random.Random = field(default_factory=lambda: random.Random(secrets.randbits(64)))
    """Chooses the timed outputs to verify; seeded from the OS, so the worker cannot predict it."""
    kernels: list = field(default_factory=list)
    first_call: bool = True
    hang_watched: dict = field(default_factory=dict)
    """What `Effort.hang_watch` watched (the load, the first call) -> its `hangwatch.Watch`."""
    expert: WorkerConn | None = None
    waited_s: float = 0.0
    """Seconds spent waiting for the device lock or the expert twin: added to the attempt's budget."""
    window: object = None
    """In a timing loop that interleaves with other slots' (grader/devicelock.py), what each window of the loop
    takes (`_window`, given its kind); None when the loop holds the device alone, or outside a loop."""
    window_wait_s: float = 0.0
    """Seconds the current loop has waited for its windows (other slots' device work)."""
    window_held_s: float = 0.0
    """Seconds the current loop has held its windows: the device time it has used."""
    gave_way: int = 0
    """Times the current loop gave way to waiting check work (`_give_way`), and the seconds that took."""
    gave_way_s: float = 0.0
    held_since: float = 0.0
    """When the current loop came in or last gave way (`_give_way`)."""
    watch: object = None
    """grader.devicewatch.DeviceWatch of the device, or None (no GPU, no NVML)."""
    roles: Callable[[], dict[int, str]] = dict
    """pid -> role of the service's processes now, for the watch's report."""
    answers_via: str | None = None
    """How the reference's answers reached this process: arena (pinned or not), or a memfd and why."""
    given: tuple | None = None
    """(seed, given, fd) of the last inputs a task's own `get_inputs()` made (`_task_inputs`): the expert and
    the candidate of one timed pair take the same ones."""
    digests: dict = field(default_factory=dict)
    """seed -> digest of the task-made inputs handed out for it, checked when the reference makes them again."""
    own_kernels: list = field(default_factory=list)
    """The `__global__` kernels a cuda candidate's source declares (`statics.declared_kernels`), or the `@triton.jit`
    functions of a Triton candidate's: every observed call after the check calls must run one of them on the
    device (graph replay of library kernels passes the aten-op rule: H200 run 24, L3:T28; the launch records a
    Triton hook keeps live in the worker's memory, where a candidate could forge them)."""
    build_failed: str = ""
    """The error of the candidate's first extension build that raised at load (it may have fallen back)."""
    slack_used: float = 0.0
    """The largest expert-measured allowance (`compare.expert_slack`) a passing output needed; 0: none."""
    answers: AnswerPool | None = None
    """The service's kept reference answers (`grader.answers`), or None."""
    waiting: Callable[[], bool] | None = None
    """Whether another attempt at the task waits to be graded (`grade_attempt`), or None: every answer offered."""
    part_inner: float = 0.0
    """The seconds of the parts (`_part`) done so far inside the part now open, which it does not count as its own."""

    @property
    def cuda(self) -> bool:
        return self.slot.device.startswith("cuda")

    def close_given(self) -> None:
        if self.given is not None:
            os.close(self.given[2])
            self.given = None


@dataclass(frozen=True)
class _Size:
    """One size as the calls need it."""

    key: str
    hidden: bool
    specs: list
    out_shape: tuple
    out_nbytes: int
    given: bool = False
    """Inputs made by the task's own `get_inputs()` in its reference worker and handed to the workers
    (`TaskCard.inputs_from == "task"`), not drawn by each of them from `specs`."""
    plan: SeedPlan | None = None
    """Which seed each call takes, and which timed calls are verified (`grader.answers.SeedPlan`)."""
    answers: dict = field(default_factory=lambda: {"kept": 0, "computed": 0})
    """The size's verifications on a kept answer, and on one the reference computed."""

    @property
    def label(self) -> str:
        return "hidden" if self.hidden else self.key


def _grade_size(g: _Grade, size: dict, hidden: bool, first: bool = False) -> tuple[SizeResult, float | None]:
    """One size's checks and timing loop."""
    card = g.task.card
    out_shape = resolve_shape(card.output_shape, size)
    key, out_nbytes = size_key(size), DTYPE_BYTES[card.output_dtype] * _prod(out_shape)
    sz = _Size(key=key, hidden=hidden, specs=resolve_specs(card, size), out_shape=out_shape, out_nbytes=out_nbytes,
               given=card.inputs_from == "task", plan=_seed_plan(g, key, out_nbytes))
    _trim(g, g.conn, key, candidate=True)
    _watch(g, g.conn, True)
    worst, check_ms, check_min_ms, checks_slow = _check_size(g, sz)
    # At the grade's first size the check calls' records are judged before the timing loop, whose calls and
    # verifications a candidate that already broke a rule of its task would otherwise hold the device for (H200 run
    # 66: attempts whose first check call ran the task's library op went on through 20 timed pairs, 21-24 s a
    # grade). Rules judge one call at a time, so the floor is the one the judgement after the loop gave, in the same
    # order. Only there (`Effort.judge_first`): the observation's close and reopen cost time (0.37 s a CPU grade at
    # every size), and at later sizes the judgement after the loop, as before, sees the check calls too.
    observed: list[dict] = []
    if first:
        with _part(g, "observation, judged early"):
            _judge_observed(g, sz, _watch(g, g.conn, False))
    t, verifying = time.perf_counter(), g.phases["correctness"]
    cand_ms, exp_ms, timed, late_ms, watched, loop, verified = _time_size(g, sz, observed, check_ms, check_min_ms,
                                                                         reopen=first, checks_slow=checks_slow)
    g.phases["timing"] += time.perf_counter() - t - (g.phases["correctness"] - verifying)
    worst = max(worst, verified)
    # the pool's seeds this size's calls took (every other call's derives from the grade's root seed), written now
    # that the grade is past them
    loop = {**loop, "answers": {**sz.answers, "check_seeds": sz.plan.check,
                                "call_seeds": {str(k): s for k, s in sorted(sz.plan.calls.items()) if k < len(timed)}}}
    cand_ms = [c + late_ms for c in cand_ms]
    logs = [log2_speedup(e, c) for e, c in zip(exp_ms, cand_ms)]
    c_med, e_med = median(cand_ms), median(exp_ms)
    measured = 2.0 ** median(logs)
    bw = next((v for k, v in BANDWIDTH_BYTES_PER_S.items() if k in g.device_name), BANDWIDTH_BYTES_PER_S["cpu"])
    floor_ms = bytes_floor(card, size) / bw * 1e3
    if c_med < floor_ms:
        raise Floor(Status.CHEAT_FLAGGED, Reason.BELOW_FLOOR,
                    f"median {c_med * 1e3:.2f} us is below the physical floor {floor_ms * 1e3:.2f} us "
                    f"({bytes_floor(card, size) / 1e6:.1f} MB at {bw / 1e12:.1f} TB/s)")
    return SizeResult(size_key=sz.label, hidden=hidden, cand_ms=c_med, expert_ms=e_med,
                      cand_ms_ci=median_ci(cand_ms), expert_ms_ci=median_ci(exp_ms), reps=len(cand_ms),
                      log2_speedup_ci=median_ci(logs), late_ms=late_ms, speedup=clip_speedup(measured),
                      max_rel_err=worst, device_watch=watched, loop=loop), measured


def _max_reps(eff: Effort, out_nbytes: int) -> int:
    """A size's most timed pairs: `Effort.max_reps`, fewer where the candidate's kept outputs would pass their
    budget, never fewer than `Effort.min_reps`."""
    return max(eff.min_reps, min(eff.max_reps, eff.kept_output_bytes // max(out_nbytes, 1)))


def _seed_plan(g: _Grade, key: str, out_nbytes: int) -> SeedPlan:
    """The size's `SeedPlan`: the pool's seeds (none without a pool) for the check calls and the calls a loop that
    stops at `Effort.min_reps` pairs makes (its warm-up pairs, its pairs and the traced call, which takes a pair's
    place when the loop can make no more), and a priority for each call the loop can make."""
    eff = g.effort
    max_reps = _max_reps(eff, out_nbytes)
    order = g.answers.order(g.task.expert_key, key, g.rng) if g.answers is not None else []
    return SeedPlan(order, eff.check_calls, eff.warmup_pairs + max_reps + 1,
                    eff.warmup_pairs + min(eff.min_reps + 1, max_reps), g.rng)


def _seed(pooled: int | None, fresh: Callable[[], int]) -> int:
    """A call's seed: the pool's, or else a fresh one."""
    return fresh() if pooled is None else pooled


def _check_size(g: _Grade, sz: _Size) -> tuple[float, float, float, bool]:
    """Fully verified calls; the worst error seen, the device ms of the last call (`Effort.slow_loops`) and of the
    fastest (`clip_witnessed`; the attempt's first call, which compiles, included: it is never the fastest), and
    whether two or more of them were slow by their own device work (`Effort.slow_checks_warm`). The
    attempt's first call compiles, under no hold; the expert's first call at the size (`_expert_warmup`) runs last
    (with `Effort.expert_early`, one that compiles runs beside the size's first check call: `_expert_early`).
    With `Effort.check_windows` each call, each piece of each verification and the expert's call take a check window
    of their own (but an expert's call that compiles: none); else they share one shared hold, taken once the first
    call is done. The expert's worker starts before the first hold."""
    worst = 0.0
    t = time.perf_counter()

    def reference_first() -> None:
        """The task's reference worker starts (seconds: CUDA, the task's imports) before any hold on the device, which
        every timing loop would otherwise wait out; a start that fails fails again, and is reported, in `_reference`."""
        if g.effort.reference_first:
            with _part(g, "reference's worker, kept or started"), \
                    contextlib.suppress(OSError, wire.WireError, RuntimeError, ValueError):
                _reference_worker(g)

    # `Effort.first_call_early`: the attempt's first call, which needs nothing of the task's worker, runs before it is
    # waited for (started ahead, it boots beside the attempt's load and that call)
    wait_after_first = g.effort.first_call_early and g.first_call and not sz.given
    if not wait_after_first:
        reference_first()
    windows = g.effort.check_windows
    expert, check_ms, check_min_ms = None, 0.0, math.inf
    settled = []  # the device ms of each check call that neither compiled nor was let through its gate
    with contextlib.ExitStack() as held:
        def first_piece() -> None:
            """Before the size's first piece of check work: the expert's worker starts (a start takes seconds), and
            without check windows the size's one shared hold is taken."""
            nonlocal expert
            if expert is None:
                expert = _expert_worker(g)
                _trim(g, expert, sz.key)
                if not windows:
                    held.enter_context(_hold(g, "shared", "check calls"))

        def hold(purpose: str = "check window", label: str = ""):
            """What a piece of check work takes: its own check window (counted under `purpose`, its work called
            `label` where device windows wait on it), or nothing inside the size's one shared hold."""
            first_piece()
            return _hold(g, "check", purpose, f"check window: {label or purpose}") if windows else \
                contextlib.nullcontext()

        early = None  # `Effort.expert_early`: the expert's compiling call, sent now, read before the task's worker is
        if g.effort.expert_early and windows and not sz.given and not wait_after_first:  # next asked anything
            first_piece()
            if sz.key not in expert.warmed:
                early = _expert_early(g, expert, sz)
        warmed_early = early is not None
        for i in range(g.effort.check_calls):
            seed = _seed(sz.plan.check_seed(i), lambda: derive_seed(g.seed, sz.key, "check", i))
            t_call = time.perf_counter()
            # The attempt's very first call JIT-compiles for seconds of CPU: it runs without the device
            # lock so another slot's timing does not wait on a compiler; at worst it overlaps one of that
            # slot's warm-up pairs, which are never counted.
            compiling = g.first_call
            g.first_call = False
            # A size's first call apart in the lock's stats: a kernel specialised on the size compiles there, inside
            # its check window (the expert's first call at a size, which holds nothing, took 486 ms on H200 run 66)
            first = ", a size's first" if i == 0 else ""
            gate_it = (windows and g.effort.gated_check_calls and g.cuda and g.conn.gate is not None
                       and not sz.given and not compiling)
            try:
                with _part(g, COMPILING_CALL_PART if compiling else "check call"):
                    if gate_it:
                        first_piece()
                        reply = _gated_check_call(g, sz, seed, "check call" + first,
                                                  CHECK_PATIENCE_S if first else LATER_CHECK_PATIENCE_S)
                    else:
                        with contextlib.nullcontext() if compiling else hold("check window" + first,
                                                                             "check call" + first):
                            reply = _cand_call(g, sz, seed, keep_inputs=True, tag="check",
                                               quiet=_quiet(g, "first call") if compiling else None)
            except BaseException:
                if early is not None:  # read all the same: the kept worker's channel stays in step for the next grade
                    early(quietly=True)
                raise
            finally:  # charged to compilation however it ended, as its part is (`part_lines` takes it out once)
                if compiling:
                    g.phases["compile"] += time.perf_counter() - t_call
                    t += time.perf_counter() - t_call
            if early is not None:  # charged to the expert phase, as the warm-up after the check calls is
                with _part(g, "expert's warm-up"):
                    t += early()
                early = None
            if wait_after_first:
                wait_after_first = False
                reference_first()
            if not compiling:
                _note_parts(g, "check call" + first, reply)
                g.gpu_lock.note(f"check call{first}: its device time", float(reply.get("ms") or 0.0) / 1e3)
                if reply.get("stalled"):  # let through before it said it was queued: its window held its launch too
                    g.gpu_lock.note(f"check call{first}: let through stalled, its window",
                                    float(reply.get("window_ms") or 0.0) / 1e3)
            check_ms = float(reply.get("ms") or 0.0)
            check_min_ms = min(check_min_ms, check_ms)
            if not compiling and not reply.get("stalled"):
                settled.append(check_ms)
            with _part(g, "verification, of a check call"):
                v = _verify(g, sz, reply["idx"], seed, with_inputs=True, piece=hold)
            worst = max(worst, v.max_rel_err)
            if not v.ok:
                raise _built_instead(g, Floor(Status.WRONG_OUTPUT, v.reason_code, f"size {sz.label}: {v.detail}"),
                                     "gave a wrong output")
        if expert is not None and not warmed_early:  # charged to the expert phase
            with _part(g, "expert's warm-up"), \
                    contextlib.nullcontext() if sz.key not in expert.warmed else hold(label="expert's warm-up"):
                # (a call that compiles: none)
                t += _expert_warmup(g, expert, sz)
    g.phases["correctness"] += time.perf_counter() - t
    # `Effort.slow_checks_warm`'s evidence: two check calls at least, each slow by its own device work (a compiling
    # call times its compiler, one let through its gate its host's waits)
    checks_slow = len(settled) >= 2 and min(settled) >= SLOW_CALL_MS
    return worst, check_ms, check_min_ms if check_min_ms < math.inf else 0.0, checks_slow


TRACE_PARTS = ("ops' session closed", "device's session opened", "device's session closed", "ops' session reopened")
"""A traced call's sessions in the worker (its reply's `trace_ms`, `observe.Observation.call`)."""


CHECK_PATIENCE_S = 0.3
"""How long a size's first check call's launch may take, gated (`Effort.gated_check_calls`), before the parent opens
its gate anyway: a kernel specialised on the size compiles there (H100 run 75: 112 ms of the call's 138 ms window). A
launch that waits for the device behind the closed gate (a module's first load) waits this out: the slot's time,
not the device's."""
LATER_CHECK_PATIENCE_S = 0.05
"""The same for a size's later check calls, whose kernels are compiled and loaded (run 75: 16 ms a call, observed)."""


def _gated_check_call(g: _Grade, sz: _Size, seed: int, label: str, patience_s: float) -> dict:
    """A check call through the candidate's launch gate (`Effort.gated_check_calls`): a check place, and in it a draw
    window from its message to its closed gate (its worker, observing the call, draws the inputs first) and one from
    the gate's opening to its reply; its launch in neither, for up to `patience_s`. Its reply, checked as
    `_cand_call`'s."""
    lock = g.gpu_lock

    def window(kind: str):
        return lock.window("draw", stat="check", label=f"check window: {label}, gated, "
                                                       f"{'drawn' if kind == 'draw' else 'let through'}")
    with _hold(g, "check", f"check window, gated: {label}", whole=False):
        return _cand_call(g, sz, seed, keep_inputs=True, tag="check", through=(window, patience_s))


def _traced_call(g: _Grade, sz: _Size, seed: int, timed: list, whole) -> list[dict]:
    """The drawn call of a size's timing loop, alone in an observation with the device traced; its record. Only the
    call takes what an untimed call of the loop takes (`whole`, a draw window; `_traced`): opening and closing its
    observation are the worker's host work, a session of the ops of its threads started, and stopped and its record
    attributed (until H100 run 78 the three round trips were one draw, 146 ms at the median). Where its time goes is
    counted in the lock's stats under "traced call" (`_note_traced`)."""
    t = time.perf_counter()
    _watch(g, g.conn, True)
    opened = time.perf_counter() - t
    reply = _traced(g, sz, seed, "timed", whole)
    timed.append((reply["idx"], seed))
    t = time.perf_counter()
    record = _watch(g, g.conn, False)
    _note_traced(g, reply, opened, time.perf_counter() - t)
    return record


def _traced(g: _Grade, sz: _Size, seed: int, tag: str, whole) -> dict:
    """The candidate's traced call in a draw window (`whole`, labelled "traced call"): the whole request, or with
    `Effort.traced_release` up to its worker's "released", so the device's session closes in no window."""
    if g.effort.traced_release:
        return _cand_call(g, sz, seed, keep_inputs=False, tag=tag, trace=True,
                          released=lambda: whole(label="traced call"))
    with whole(label="traced call"):
        return _cand_call(g, sz, seed, keep_inputs=False, tag=tag, trace=True)


def _note_traced(g: _Grade, reply: dict, opened: float = 0.0, closed: float = 0.0) -> None:
    """A traced call's parts in the device lock's stats: the worker's parts of the call and of its sessions, and the
    round trips that open and close its observation (0: it was traced inside the size's own, a warm-up call)."""
    _note_parts(g, "traced call", reply)
    _note_parts(g, "traced call", {"parts_ms": reply.get("trace_ms")}, TRACE_PARTS)
    if opened or closed:
        g.gpu_lock.note("traced call: observation opened (round trip)", opened)
        g.gpu_lock.note("traced call: observation closed and reported (round trip)", closed)


def _time_size(g: _Grade, sz: _Size, observed: list, check_ms: float, check_min_ms: float, reopen: bool = False,
               checks_slow: bool = False) -> tuple[list, list, list, float, dict | None, dict, float | None]:
    """Expert and candidate, each in its own worker with the same timing code, called in pairs on the
    same fresh inputs (the candidate first in one device window, `Effort.paired_windows`; ABBA order without it)
    while the slot holds the device alone. The speedup is the median of
    the pairs' log-ratios: drift in clocks or temperature moves both calls of a pair alike. Returns
    (candidate ms, expert ms, [(output index, seed)] of the candidate's calls, late ms, what the device
    watch saw meanwhile, where the loop's time went: `_loop_record`, and the worst error of the timed outputs,
    verified in the loop's hold after the observed calls were judged); the
    observed calls' records are added to `observed`. `check_ms`: the device ms of the size's last check call
    (`Effort.slow_loops`); `check_min_ms`: of its fastest (`clip_witnessed`); `checks_slow`: two or more of its check
    calls each ran `SLOW_CALL_MS` of their own device work (`Effort.slow_checks_warm`)."""
    eff = g.effort
    max_reps = _max_reps(eff, sz.out_nbytes)
    # Observed (grader/observe.py): the check calls, the warm-up calls and one call drawn among the warm-up and timed
    # calls, which also runs with the device's kernels traced (its kernels against the own-kernel and library
    # rules, their streams) and whose pair is not timed (a draw past the loop's end is an extra call). The other
    # timed calls run with no recording at all: a session over them made every call of 40 us time at 0.1-0.4 ms
    # and the experts score -0.1 against themselves (H200 runs 26 and 27). What Python can ask of the recording
    # reads the same in every call, observed or not. The draw comes after the check calls: a size's first calls
    # hold what runs once per process or shape (library handles on their own streams, cuDNN's benchmark
    # search: H200 runs 18, 22 and 23).
    trace_at = g.rng.randrange(eff.warmup_pairs + max_reps)
    expert = _expert_worker(g)
    # Slow by its check calls' own device work (`Effort.slow_checks_warm`): they warmed the device, no warm-up pair.
    slow = eff.slow_loops and eff.slow_checks_warm and checks_slow
    warming = eff.warmup_pairs > 0 and not slow  # with no warm-up call, no observation to open for one
    if reopen and warming:  # the check calls' observation was closed and judged (`_grade_size`): the warm-up calls
        _watch(g, g.conn, True)  # get one
    if warming:
        _watch(g, expert, True)  # the twin's untimed calls are observed as the candidate's are
    cand_ms, exp_ms, logs, timed, gaps, replies = [], [], [], [], ([], []), ([], [])
    traced = False
    warmed = 0
    # Split into device windows only when every call of the loop can be: gated calls need both workers' gates,
    # and a task's own inputs are made on the device by its reference worker between the calls.
    kind = "loop" if g.cuda and not sz.given and g.conn.gate is not None and expert.gate is not None else "exclusive"
    # whole(): what an ungated call of the loop takes, one draw window from its message to its reply
    with _part(g, "timing loop"), _loop(g, kind) as whole:
        t_held = time.perf_counter()
        mark = g.watch.mark() if g.watch is not None else None
        # A warm-up call's draw: up to its worker's "released" (`Effort.warmup_release`), or its whole request.
        release = (lambda: whole(label="warm-up call")) if eff.warmup_release else None

        def held():
            return contextlib.nullcontext() if release is not None else whole(label="warm-up call")

        for w in range(eff.warmup_pairs if warming else 0):
            seed = _seed(sz.plan.call_seed(len(timed)), lambda: derive_seed(g.seed, sz.key, "warmup", w))
            with held():
                _expert_call(g, expert, sz, seed, released=release)
            if trace_at == w:
                reply = _traced(g, sz, seed, "warmup", whole)
                _note_traced(g, reply)
            else:
                with held():
                    reply = _cand_call(g, sz, seed, keep_inputs=False, tag="warmup", released=release)
            traced = traced or trace_at == w
            timed.append((reply["idx"], seed))
            warmed = w + 1
            _give_way(g, kind)
            slow = eff.slow_loops and min(check_ms, float(reply.get("ms") or 0.0)) >= SLOW_CALL_MS
            if slow:
                break  # a call this long warms the device itself
        if warming or not reopen:  # the recording stops before the first timed call (the check calls' own, if open)
            observed.extend(_watch(g, g.conn, False))
        if warming:
            _watch(g, expert, False)
        t_size = time.monotonic()
        ended = None  # why the timed pairs stopped (`_enough`, the one-pair stop), for the record
        paired = (eff.paired_windows and g.window is not None and eff.split_window and eff.fill_behind
                  and not sz.given)
        for r in range(max_reps):
            seed = _seed(sz.plan.call_seed(len(timed)), lambda: derive_seed(g.seed, sz.key, "time", r))
            if trace_at == eff.warmup_pairs + r:  # the drawn call: observed and traced, never timed
                observed.extend(_traced_call(g, sz, seed, timed, whole))
                traced = True
                continue
            if paired:
                c, e = _timed_pair(g, expert, sz, seed)
            elif r % 2:
                c = _cand_call(g, sz, seed, keep_inputs=False, tag="timed")
                e = _expert_call(g, expert, sz, seed, gated=True)
            else:
                e = _expert_call(g, expert, sz, seed, gated=True)
                c = _cand_call(g, sz, seed, keep_inputs=False, tag="timed")
            timed.append((c["idx"], seed))
            replies[0].append(c)
            replies[1].append(e)
            cand_ms.append(c["ms"])
            exp_ms.append(e["ms"])
            gaps[0].append(e.get("gap_ms", 0.0))
            gaps[1].append(c.get("gap_ms", 0.0))
            logs.append(log2_speedup(e["ms"], c["ms"]))
            witnessed = eff.stalled_one_pair and slow and clip_witnessed(check_min_ms, exp_ms)
            ended = _enough(g, logs, t_size, check_min_ms, exp_ms) or ("one pair" if one_pair_ends_size(
                slow, c, e, witnessed) else None)
            if ended:
                break
            _give_way(g, kind)
        if not traced:  # the draw fell past the loop's end, or on a warm-up pair a slow candidate skipped
            seed = _seed(sz.plan.call_seed(len(timed)), lambda: derive_seed(g.seed, sz.key, "traced"))
            observed.extend(_traced_call(g, sz, seed, timed, whole))
        watched = None
        if mark is not None:  # the pair is named, every other process reported (other loops' too, interleaved)
            watched = g.watch.since(mark, {**g.roles(), g.conn.pid: "candidate timed", expert.pid: "twin timed"})
        clip_stop = len(logs) < eff.min_reps and stops_at_clip(eff, logs, median_ci(logs), check_min_ms, exp_ms)
        loop = {**_loop_record(time.perf_counter() - t_held - g.gave_way_s, *replies), "held": kind,
                "warmup_pairs": warmed,
                "interleaved": g.window is not None, "window_wait_s": round(g.window_wait_s, 4),
                "window_held_s": round(g.window_held_s, 4), "gave_way": g.gave_way,
                "gave_way_s": round(g.gave_way_s, 4), "clip_stop": clip_stop, "ended": ended or "max pairs",
                # each timed pair's log2(expert ms / candidate ms), in order: what fewer pairs would have given
                # (bench/gpu_acceptance.py `fewer_pairs_lines`)
                "log2_pairs": [round(x, 5) for x in logs]}
        with _part(g, "observation, judged"):
            _judge_observed(g, sz, observed)  # then the timed outputs, in the loop's draw windows
        verified = _verify_timed(g, sz, timed, whole)
    return cand_ms, exp_ms, timed, late_excess(gaps[1], gaps[0], eff.late_tolerance_ms), watched, loop, verified


LOOP_WALL_BUDGETS = 3
"""An interleaved loop's wall-clock cap, in size budgets: its device time is capped by `Effort.size_budget_s`, and
its wall clock (other loops' host work beside its own) only against a loop that never ends."""


CLIP_MARGIN_LOG2 = 0.5
"""How far below the clip's lower end a size's whole interval must lie for its timing to stop early."""


def beyond_clip(ci: tuple[float, float]) -> bool:
    """The whole ~95% interval of a size's log2(speedup) lies below the clip's lower end by the margin: the clipped
    speedup is the clip's end whatever more pairs say (a late charge only lowers it further). Only the lower end:
    a speedup above the clip stays timed in full, where a late charge could yet bring it under."""
    return ci[1] < math.log2(SPEEDUP_CLIP[0]) - CLIP_MARGIN_LOG2


def _enough(g: _Grade, logs: list[float], t_size: float, check_min_ms: float, exp_ms: list[float]) -> str | None:
    """A size's timed pairs are enough: its interval is as narrow as the target (`interval`), or its budget is spent
    (`budget`; both after `Effort.min_reps` pairs); or it stops at the clip (`clip`, `stops_at_clip`). None while
    it needs more."""
    eff = g.effort
    if len(logs) < min(eff.min_reps, eff.clip_reps):
        return None
    lo, hi = median_ci(logs)
    if len(logs) >= eff.min_reps:
        if (hi - lo) / 2 <= eff.target_log2_halfwidth:
            return "interval"
        if _spent(g, t_size):
            return "budget"
    return "clip" if stops_at_clip(eff, logs, (lo, hi), check_min_ms, exp_ms) else None


def stops_at_clip(eff: Effort, logs: list[float], ci: tuple[float, float], check_min_ms: float,
                  exp_ms: list[float]) -> bool:
    """After `Effort.clip_reps` pairs, the pairs' interval `ci` lies below the clip (`beyond_clip`), and the size's
    fastest check call does too (`clip_witnessed`)."""
    return len(logs) >= eff.clip_reps and beyond_clip(ci) and clip_witnessed(check_min_ms, exp_ms)


def clip_witnessed(check_min_ms: float, exp_ms: list[float]) -> bool:
    """The size's fastest check call lies below the clip by the margin as well, against the twin's median so far: a
    witness the five-pair stop needs besides its pairs. Timed pairs can all be let through their gates (each then
    timed with its host's waits), an honest kernel's too: H200 run 61 timed `log_softmax_torch_composed`, 0.25 ms
    at its other hidden size, at 17 ms over 14 pairs of which 13 were let through, and stopped it at the clip. A
    check call is never gated, so it waits for no gate; a candidate slow by its own doing (a host loop, syncs) is
    slow there too. Only a stop is at stake: a size without the witness is timed in full."""
    if not exp_ms or check_min_ms <= 0:
        return False
    return log2_speedup(median(exp_ms), check_min_ms) < math.log2(SPEEDUP_CLIP[0]) - CLIP_MARGIN_LOG2


SLOW_CALL_MS = 20.0
"""A candidate whose last check call and warm-up call at a size each ran this long on the device is slow there: its own
calls warm the device (`Effort.slow_loops`); with `Effort.slow_checks_warm`, two check calls that each ran this long
by their own device work do too."""


ONE_PAIR_CLIP_MARGIN_LOG2 = 2.0
"""How far below the clip's lower end one clean timed pair must lie to end its size (`Effort.slow_loops`): a
candidate 256 times slower than the expert, where the clip is 64. One pair timed alone on the device, neither call
let through its gate, after the check calls (and a warm-up pair, unless they were slow: `Effort.slow_checks_warm`)
at the size: no drift of clocks or warmth moves a ratio by four times."""


STALL_ALLOWANCE_MS = 100.0
"""What a call let through its gate may owe to its host's waits, in `Effort.stalled_one_pair`'s stop: four times the
most seen of an honest kernel (H200 run 50: 0.16 ms timed at 25 ms; run 61: 0.25 ms at 17 ms)."""


def one_pair_ends_size(slow: bool, cand: dict, twin: dict, stalled_witnessed: bool = False) -> bool:
    """One timed pair (the candidate's and the twin's replies) lies so far below the clip that more pairs cannot lift
    the size's clipped speedup: the candidate `slow` at the size (its last check call and warm-up call, or two check
    calls: `Effort.slow_checks_warm`), this pair's call slow too (another slot's side stream let into one window cannot make a fast kernel look slow in all three),
    neither call let through its gate (a call let through times its host's waits too: H200 run 50 timed an honest
    0.16 ms kernel at 25 ms so, and clipped it; every slow demo candidate's calls are let through, and stop by
    `Effort.clip_reps`). `stalled_witnessed` (`Effort.stalled_one_pair`, and the size's fastest check call past the
    clip): a candidate's call let through counts too, less `STALL_ALLOWANCE_MS`; a twin's let through only ever
    lengthens the expert's side, which lifts the ratio."""
    if not slow or cand["ms"] < SLOW_CALL_MS:
        return False
    if (cand.get("stalled") or twin.get("stalled")) and not stalled_witnessed:
        return False
    cand_ms = cand["ms"] - (STALL_ALLOWANCE_MS if cand.get("stalled") else 0.0)
    return cand_ms > 0 and log2_speedup(twin["ms"], cand_ms) < math.log2(SPEEDUP_CLIP[0]) - ONE_PAIR_CLIP_MARGIN_LOG2


def log2_speedup(expert_ms: float, cand_ms: float) -> float:
    """One pair's log2 speedup of the candidate over the expert (times floored at 1 ps: a zero never divides)."""
    return math.log2(max(expert_ms, 1e-9) / max(cand_ms, 1e-9))


def _give_way(g: _Grade, kind: str) -> None:
    """Between two pairs: once the loop has held the device `Effort.give_way_s` since it came in or last gave way,
    let waiting check work go first (`DeviceLock.give_way`); the wait is the grader's time, neither the attempt's nor
    the size's budget's."""
    if not g.effort.give_way_s or time.monotonic() - g.held_since < g.effort.give_way_s:
        return
    waited = g.gpu_lock.give_way(kind)
    if waited:
        g.held_since = time.monotonic()
        g.gave_way += 1
        g.gave_way_s += waited
        g.waited_s += waited


def _spent(g: _Grade, t_size: float) -> bool:
    """A size's timing budget is spent: the device time its windows held, for a loop interleaved with others'
    (whose wall clock holds their work too); the wall clock since the timed pairs began, for a loop alone. Waits
    while the loop gave way to check work count to neither."""
    wall = time.monotonic() - t_size - g.gave_way_s
    if g.window is None:
        return wall > g.effort.size_budget_s
    return g.window_held_s > g.effort.size_budget_s or wall > LOOP_WALL_BUDGETS * g.effort.size_budget_s


def _loop_record(held_s: float, cand: list[dict], twin: list[dict]) -> dict:
    """Where a size's timing loop spent the device's exclusive time: the seconds it held the device, and per
    timed call (medians, ms) the parent's round trip, the worker's span of the call and the device interval,
    for candidate and twin; how many calls the parent had to let through the launch gate (`stalled`)."""
    def med(rows: list[dict], key: str) -> float | None:
        vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return round(median(vals), 4) if vals else None

    def parts(rows: list[dict]) -> list | None:
        """Per part of the worker's span (`parts_ms` of a reply: park, inputs, timed call, check, rest), its
        median over the calls."""
        return _medians([r["parts_ms"] for r in rows if isinstance(r.get("parts_ms"), list)
                         and len(r["parts_ms"]) == 5])

    return {"held_s": round(held_s, 4), "pairs": len(cand),
            **{f"{who}_{what}_ms": med(rows, key) for who, rows in (("cand", cand), ("twin", twin))
               for what, key in (("round_trip", "parent_ms"), ("span", "span_ms"), ("device", "ms"))},
            "cand_parts_ms": parts(cand), "twin_parts_ms": parts(twin),
            "cand_window_parts_ms": window_parts(cand), "twin_window_parts_ms": window_parts(twin),
            "stalled": sum(bool(r.get("stalled")) for r in cand + twin)}


def window_parts(rows: list[dict]) -> list | None:
    """Where the parent's device windows of a loop's timed calls went (ms, the median over the calls): until the
    worker saw its gate open, until it saw the end event, its synchronises, and until the parent had its "done".
    From the parent's opening and "done" (`window_ns`) and the worker's marks between (`marks_ns`), on the clock
    every process of the host shares; a diagnostic for the acceptance, never a verdict (a worker's marks are its
    word)."""
    got = []
    for r in rows:
        window, marks = r.get("window_ns"), r.get("marks_ns")
        if isinstance(window, list) and isinstance(marks, list) and len(window) == 2 and len(marks) == 3 \
                and all(isinstance(t, int) for t in window + marks):
            edges = [window[0], *marks, window[1]]
            got.append([(b - a) / 1e6 for a, b in zip(edges, edges[1:])])
    return _medians(got)


def _medians(rows: list[list[float]]) -> list | None:
    """The median of each column of equally long rows (ms, to 0.1 us); None without rows."""
    return [round(median(col), 4) for col in zip(*rows)] if rows else None


WINDOW_SLACK_MS = 0.05
"""How far a call's device interval plus gap may exceed the parent's window around it (event resolution)."""


def window_holds(reply: dict) -> bool:
    """A gated call's device interval and its gap (start..end..done, the events behind the gate) lie inside the
    parent's window from opening the gate to the worker's "done". A worker that says "done" while its work
    still runs (a host callback of the candidate's, writing the frame) would free the device for another
    slot's window too early; its own reply then shows more device time than the window held."""
    window = reply.get("window_ms")
    if not isinstance(window, (int, float)):
        return True
    return reply["ms"] + float(reply.get("gap_ms") or 0.0) <= window + WINDOW_SLACK_MS


def late_excess(cand_gaps: list[float], twin_gaps: list[float], tolerance_ms: float) -> float:
    """Work still running after the call returned lengthens every one of the candidate's waits for
    the device-wide done event; the host's wake-up noise lengthens some waits of either worker. So
    the charge is how far the candidate's lower quartile lies above the twin's upper quartile: the
    hidden work, less the spread of the wake-up (run 2 on the H200 charged honest sizes 2-33 us
    when it compared medians)."""
    if not cand_gaps or not twin_gaps:
        return 0.0
    excess = quantile(cand_gaps, 0.25) - quantile(twin_gaps, 0.75)
    return excess if excess > tolerance_ms else 0.0


@contextlib.contextmanager
def _loop(g: _Grade, kind: str):
    """A timing loop's hold on the device (`loop` or `exclusive`); yields what an ungated call of the loop takes
    around itself. Meanwhile `g.window` is what each gated call takes (None: the loop holds the device alone)."""
    with _hold(g, kind):
        g.window = functools.partial(_window, g) if kind == "loop" and g.gpu_lock.interleave else None
        g.window_wait_s = g.window_held_s = g.gave_way_s = 0.0
        g.held_since = time.monotonic()
        g.gave_way = 0
        try:  # an ungated call is untimed device work: a draw window
            yield functools.partial(g.window, "draw") if g.window is not None else _no_piece
        finally:
            g.window = None


@contextlib.contextmanager
def _window(g: _Grade, kind: str, label: str = ""):
    """One window of an interleaved loop's device work (`DeviceLock.window`: "draw" or "device"; a draw's work called
    `label`, else an untimed call); the wait for it is the grader's time, not the attempt's, and not the size's timing
    budget's (`window_wait_s`)."""
    t = time.monotonic()
    with g.gpu_lock.window(kind, label=f"loop draw: {label or 'untimed call'}" if kind == "draw" else ""):
        t_in = time.monotonic()
        g.waited_s += t_in - t
        g.window_wait_s += t_in - t
        try:
            yield
        finally:
            g.window_held_s += time.monotonic() - t_in


@contextlib.contextmanager
def _hold(g: _Grade, kind: str, purpose: str = "", label: str = "", whole: bool = True):
    """The device lock, of any kind (`shared` and `check` name their `purpose` for the lock's stats, `check` its
    work's `label`, and with `whole` off is the place alone); time spent waiting for it is not the attempt's."""
    t = time.monotonic()
    with (g.gpu_lock.check(purpose, label, whole) if kind == "check" else g.gpu_lock.shared(purpose)
          if kind == "shared" else getattr(g.gpu_lock, kind)()):
        g.waited_s += time.monotonic() - t
        yield


COMPILING_CALL_PART = "check call, the attempt's first"
"""The part (`_part`) that is the attempt's very first call, which compiles: counted in the compile phase too."""


@contextlib.contextmanager
def _part(g: _Grade, name: str):
    """Count the wall time of a part of the grade, waits for the device included, under "grade: `name`" in the
    device lock's stats (`DeviceLock.note`): where a slot's time goes, beside the phases, whose correctness phase
    holds most of it (H200 run 66: 1,580 of 3,756 slot-seconds) and says nothing of its parts. A part counts its
    own time only, not that of the parts inside it, so the parts of a grade add up to its wall time."""
    t, outer = time.perf_counter(), g.part_inner
    g.part_inner = 0.0
    try:
        yield
    finally:
        took = time.perf_counter() - t
        g.gpu_lock.note(f"grade: {name}", took - g.part_inner)
        g.part_inner = outer + took


def _verify_timed(g: _Grade, sz: _Size, timed: list, hold: Callable) -> float:
    """Verify a sample of the timed outputs, those of lowest secret priority among the calls made (`SeedPlan.verified`:
    a uniformly random choice, however many calls the loop made); the worst error. `hold()`: what each piece of a
    verification takes (a draw window of the timing loop's)."""
    t = time.perf_counter()
    worst = 0.0
    eff = g.effort
    n_verify = min(len(timed), max(eff.verify_timed, math.ceil(eff.verify_fraction * len(timed))))
    for k in sz.plan.verified(len(timed), n_verify):  # a uniformly random choice (`SeedPlan`)
        idx, seed = timed[k]
        with _part(g, "verification, of a timed call"):
            v = _verify(g, sz, idx, seed, with_inputs=False, piece=hold)
        worst = max(worst, v.max_rel_err)
        if not v.ok:
            raise _built_instead(g, Floor(Status.WRONG_OUTPUT, Reason.TIMED_OUTPUT_MISMATCH,
                                          f"a timed call's output was wrong at size {sz.label}: {v.detail}"),
                                 "gave a wrong output")
    g.phases["correctness"] += time.perf_counter() - t
    return worst


def _expert_worker(g: _Grade) -> WorkerConn:
    if g.expert is None:
        t = time.perf_counter()
        try:
            with _part(g, "expert's worker, kept or started"):
                g.expert = (_reference_of(g.slot, g.task) if _one_worker(g.slot, g.task) else
                            g.slot.expert(g.task.expert_key, g.task.card.expert, EXPERT_TIMEOUT_S,
                                          kernels=g.task.expert_kernels()))
        except (OSError, wire.WireError, RuntimeError) as e:
            g.slot.drop_expert(g.task.expert_key)
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the expert's worker failed: {e}") from None
        g.phases["expert"] += time.perf_counter() - t
        g.waited_s += time.perf_counter() - t
    return g.expert


KEEP_MEMORY_BELOW = 0.6
"""`Effort.keep_size_memory`: the share of the device's memory in use under which a kept worker moving to another
size keeps its cached memory. Chosen, not measured: H100 run 102's round 1 used a median 43.5 of 79.6 GiB (55%),
p90 50.6 (64%), and the device read full once in its every round; the more the kept workers hold, the less often
they keep, so the device's use stays near this share where it would pass it."""


def _room_to_keep(g: _Grade) -> bool:
    """Whether a kept worker moving to another size keeps its cached memory (`Effort.keep_size_memory`): the device
    reads under `KEEP_MEMORY_BELOW` of its memory in use. No reading, no keeping."""
    if not g.effort.keep_size_memory or g.watch is None:
        return False
    share = g.watch.share_used()
    return share is not None and share < KEEP_MEMORY_BELOW


def _trim(g: _Grade, conn: WorkerConn, key: str, candidate: bool = False) -> None:
    """Ask a worker to give its cached device memory back when it last worked at another size than `key`, outside
    any window (`Worker._trim`): a driver's free and map of memory is host work, and a dozen slots' workers, each
    holding every size's blocks, ran the device out of memory (H200 runs 65 and 66: an honest attempt and three of
    the experts' own grades ended `infra_error`). A kept worker keeps it while the device has room
    (`_room_to_keep`), and only notes the size. A candidate's reply is checked as after any of its requests; a
    kept worker that fails here fails again, and is reported, at its next request."""
    if not g.cuda or conn.trimmed == key:
        return
    t = time.perf_counter()
    keep = not candidate and _room_to_keep(g)
    try:
        reply, _, _ = conn.request({"op": "trim", "key": key, **({"keep": True} if keep else {})},
                                   min(g.remaining(), EXPERT_TIMEOUT_S))
    except (OSError, wire.WireError):
        if candidate:
            raise
        return
    if candidate:
        _check_guards(conn, reply, g.slot)
    conn.trimmed = key
    if reply.get("emptied"):  # in the acceptance's breakdown of check work, though it holds nothing
        g.gpu_lock.note("trim, in no window", time.perf_counter() - t)
    elif reply.get("kept"):
        g.gpu_lock.note("trim, memory kept (the device had room)", time.perf_counter() - t)


def _expert_warmup(g: _Grade, expert: WorkerConn, sz: _Size) -> float:
    """The expert's first call at a size in this grade, which compiles its kernels the first time its worker runs at
    the size (H200 run 45: 0.2 s a call); charged to the expert phase. An ungated call, inside what its caller took:
    the size's shared hold, or a check window (`Effort.check_windows`), or nothing when it compiles. Gated (0.13.0)
    its first launch waited for the device behind its closed gate until the parent's patience ran out (H200 run 48:
    3.8 s a call). Returns its seconds."""
    t = time.perf_counter()
    compiling = sz.key not in expert.warmed  # counted apart: outside any window (H200 run 58: 484 ms against 1.6)
    warm = _expert_call(g, expert, sz, derive_seed(g.seed, sz.key, "expert-warmup"))
    expert.warmed.add(sz.key)
    # apart again where its worker was given its kernels built ahead (grader.expertseed): it compiles none of them
    _note_parts(g, "expert warm-up" + (", compiling" if compiling else "")
                + (", its kernels planted" if compiling and expert.planted else ""), warm)
    took = time.perf_counter() - t
    g.phases["expert"] += took
    return took


def _expert_early(g: _Grade, expert: WorkerConn, sz: _Size) -> Callable[..., float]:
    """`Effort.expert_early`: the expert's first call at a size, which compiles there, sent to its worker now (in no
    window, as `_expert_warmup`'s compiling call); the function returned reads its reply, and must be called before
    the worker is asked anything else (`WorkerConn.begin`). Charged to the expert phase, and to the grader's time,
    is only what that read waits, which it returns. `quietly=True`: read on a grade's way out, its verdict no longer
    the expert's to give (a worker that failed is dropped all the same)."""
    t = time.perf_counter()
    msg, _ = _expert_msg(g, sz, derive_seed(g.seed, sz.key, "expert-warmup"))  # not given: its worker draws them
    try:
        read: Callable | Exception = expert.begin(msg, EXPERT_TIMEOUT_S)
    except (OSError, wire.WireError) as e:
        read = e
    expert.warmed.add(sz.key)
    sent = time.perf_counter() - t

    def collect(quietly: bool = False) -> float:
        t_read = time.perf_counter()
        try:
            got = read() if callable(read) else read
        except (OSError, wire.WireError) as e:
            got = e
        if quietly:
            with contextlib.suppress(Floor):
                _expert_reply(g, expert, sz, got)
            return 0.0
        reply = _expert_reply(g, expert, sz, got)
        _note_parts(g, "expert warm-up, compiling, early" + (", its kernels planted" if expert.planted else ""), reply)
        waited = sent + time.perf_counter() - t_read
        g.phases["expert"] += waited
        g.waited_s += waited
        return waited

    return collect


def _expert_call(g: _Grade, expert: WorkerConn, sz: _Size, seed: int, keep: bool = False, gated: bool = False,
                 released=None) -> dict:
    """One call of the expert, exactly as a candidate's timed call is made (`gated` in the timing loop's
    pairs, through the loop's windows); the worker's reply. Its output is kept only when asked (`_expert_output`):
    the expert is trusted, and the candidate's kept outputs already fill the budget. `released()`: the window an
    untimed call holds up to its worker's "released" (`Effort.warmup_release`), as a candidate's."""
    msg, fd = _expert_msg(g, sz, seed, keep, gated)
    if released is not None:
        msg["released"] = True
    t = time.monotonic()
    try:
        got = expert.request(msg, EXPERT_TIMEOUT_S, fd=fd, window=g.window if gated else None,
                             whole=not g.effort.split_window, released=released)
    except (OSError, wire.WireError) as e:
        got = e
    reply = _expert_reply(g, expert, sz, got)
    g.waited_s += time.monotonic() - t  # the twin's time is the grader's, not the attempt's
    return reply


def _expert_msg(g: _Grade, sz: _Size, seed: int, keep: bool = False, gated: bool = False) -> tuple[dict, int | None]:
    msg, fd = _call_msg(g, sz, seed, keep_inputs=False, tag="expert", gated=gated)
    msg["keep"] = keep
    return msg, fd


def _expert_reply(g: _Grade, expert: WorkerConn, sz: _Size, got: tuple | Exception) -> dict:
    """The expert's reply to a call (what `WorkerConn.request` returned, or what its channel raised), checked: a
    worker that died or failed is dropped, and the grade ends `infra_error`."""
    if isinstance(got, Exception):
        g.slot.drop_expert(g.task.expert_key)
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the expert's worker died: {got}") from None
    reply, _, parent_ms = got
    reply["parent_ms"] = parent_ms
    expert.drain_audit()
    if not reply.get("ok") or not window_holds(reply):
        g.slot.drop_expert(g.task.expert_key)
        why = _tail(reply.get("error", "")) if not reply.get("ok") else "it said the device was done before it was"
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the expert failed at size {sz.label}: {why}")
    return reply


def _call_msg(g: _Grade, sz: _Size, seed: int, keep_inputs: bool, tag: str, trace: bool = False,
              gated: bool | None = None) -> tuple[dict, int | None]:
    """A call's message, and the descriptor of its inputs when the task makes them itself. `gated`: through the
    launch gate (default: a timed call is). A traced call draws before its gate (no `fill_behind`): its
    observation marks the call on the device and waits for the mark, which behind a gate closed for the draw
    waited for a "drawn" never said (H200 run 64); it holds a window whole anyway."""
    gated = tag == "timed" if gated is None else gated
    msg = {"op": "call", "specs": sz.specs, "seed": seed, "out_nbytes": sz.out_nbytes, "keep_inputs": keep_inputs,
           "tag": tag, "trace": trace, "gated": gated, "behind": not g.effort.draw_before_gate,
           "fill_behind": gated and g.effort.fill_behind and not sz.given and not trace}
    if not sz.given:
        return msg, None
    given, fd = _task_inputs(g, sz, seed)
    return {**msg, "given": given}, fd


def _task_inputs(g: _Grade, sz: _Size, seed: int) -> tuple[dict, int]:
    """The task's own inputs for `seed`, made by its `get_inputs()` in its sandboxed reference worker: their
    layout and a sealed memfd (kept until the next seed, so both workers of a pair get the same one)."""
    if g.given is not None and g.given[0] == seed:
        return g.given[1], g.given[2]
    g.close_given()
    t = time.perf_counter()
    fd = None
    try:
        conn = _reference_worker(g)
        mark = conn.answer_audit_mark()
        reply, _, _ = conn.request({"op": "inputs", "seed": seed}, EXPERT_TIMEOUT_S)
        fd = wire.recv_fd(conn.sock) if reply.get("_fd") else None
        if not reply.get("ok") or fd is None or conn.drain_audit()[mark:]:
            why = reply.get("error") or "; ".join(conn.audit_lines[mark:mark + 3]) or "no inputs"
            raise RuntimeError(f"at size {sz.label}: {_tail(why)}")
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & wire.SEALS != wire.SEALS:
            raise RuntimeError("its inputs' memfd is not sealed against writes")
        given = {"metas": reply["given"]["metas"], "layout": reply["given"]["layout"]}
    except (OSError, wire.WireError, RuntimeError, ValueError, TypeError, KeyError) as e:
        if fd is not None:
            os.close(fd)
        g.slot.drop_reference(g.task.expert_key)
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the task's get_inputs failed in its sandbox: {e}") from None
    finally:
        g.waited_s += time.perf_counter() - t
    g.given = (seed, given, fd)
    g.digests[seed] = reply.get("digest")
    return given, fd


def _given_tensors(g: _Grade, sz: _Size, seed: int, device: str | None = None) -> list:
    """The tensors among the task-made inputs of `seed`, read on this side onto `device` (the slot's unless named), to
    see whether a call changed them."""
    given, fd = _task_inputs(g, sz, seed)
    try:
        return wire.tensors_from_memfd(given["metas"], os.dup(fd), device or g.slot.device)
    except (wire.WireError, OSError, ValueError, TypeError, KeyError) as e:
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the task's inputs could not be read: {e}") from None


def _cand_call(g: _Grade, sz: _Size, seed: int, keep_inputs: bool, tag: str, trace: bool = False,
               through: tuple | None = None, released=None, quiet=None) -> dict:
    """The candidate's call, its reply checked. `through`: (its windows, its patience) for an untimed call let
    through its gate and read whole (`_gated_check_call`); else a timed call takes the loop's windows. `released()`:
    the window a traced call holds up to its worker's "released" (`Effort.traced_release`)."""
    msg, fd = _call_msg(g, sz, seed, keep_inputs=keep_inputs, tag=tag, trace=trace, gated=True if through else None)
    if released is not None:
        msg["released"] = True
    if through is not None:
        window, patience_s = through
        msg["fill_behind"] = False  # an observed call's worker draws before its gate: the parent gives it a window
        reply, _, parent_ms = g.conn.request(msg, g.remaining(), fd=fd, window=window, patience_s=patience_s,
                                             read_whole=True)
        return _cand_reply(g, sz, reply, parent_ms)
    # a traced call is a window whole (its session opens with a marker kernel): its gate opens inside that one
    reply, _, parent_ms = _request(g.conn, msg, g.remaining, fd=fd,
                                   window=g.window if msg["gated"] and not trace else None,
                                   whole=not g.effort.split_window, released=released, quiet=quiet)
    return _cand_reply(g, sz, reply, parent_ms)


def _timed_pair(g: _Grade, expert: WorkerConn, sz: _Size, seed: int) -> tuple[dict, dict]:
    """A timed pair in one device window (`Effort.paired_windows`, `launcher.let_through_together`): the candidate,
    read whole, then its twin (ABAB: GRADER.md's order). The candidate's reply and the twin's, each checked as a
    call of its own is; the candidate's verdict comes first, and a twin that failed is dropped all the same. The
    twin's device window is the grader's time, not the attempt's.

    The candidate always goes first. Whatever device work its process queued before its "done" (its launch, a side
    stream, what its last call's objects ran when dropped) is over at "done", which waits for the whole device; its
    worker synchronises again after the call's thread has ended and the interpreter is checked, before it replies
    (`Effort.settled_pairs`: before the check, and says "settled", at which the twin goes). So nothing of the
    candidate's runs beside its twin's timed call. The twin going first would let the candidate's
    launch, and what it starts on a stream of its own, run beside the twin's call: its own "done" waits only for
    what is still running then."""
    cmsg, _ = _call_msg(g, sz, seed, keep_inputs=False, tag="timed")
    if g.effort.settled_pairs:  # the twin let through at the candidate's "settled", not at its reply
        cmsg["settled"] = True
    emsg, _ = _expert_msg(g, sz, seed, gated=True)
    c_got, e_got = let_through_together([GatedCall(g.conn, cmsg), GatedCall(expert, emsg)], g.remaining(), g.window)
    twin_failed = None
    try:
        e = _expert_reply(g, expert, sz, e_got)
        g.waited_s += (e.get("window_ms") or 0.0) / 1e3
    except Floor as f:
        twin_failed = f
    if isinstance(c_got, Exception):
        raise c_got
    c = _cand_reply(g, sz, c_got[0], c_got[2])
    if twin_failed is not None:
        raise twin_failed
    return c, e


def _cand_reply(g: _Grade, sz: _Size, reply: dict, parent_ms: float) -> dict:
    """A candidate's reply to a call, checked: its guards, its error, its clock, its output's metadata, its streams,
    the L2 it reserved, its own kernels."""
    card, slot = g.task.card, g.slot
    _check_guards(g.conn, reply, slot)
    if not reply.get("ok"):
        if reply.get("error_kind") == "oom":
            raise _oom(g, _tail(reply.get("error", "")))
        if reply.get("error_kind") == "compile":  # Triton compiles at the first launch
            raise Floor(Status.COMPILE_ERROR, Reason.COMPILE, _tail(reply.get("error", "")))
        raise Floor(Status.RUNTIME_ERROR, Reason.EXCEPTION, _tail(reply.get("error", "")))
    reply["parent_ms"] = parent_ms
    if reply["ms"] > reply["span_ms"] + 0.05 or reply["span_ms"] > parent_ms + 0.05:
        raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED,
                    f"worker clock inconsistent: call {reply['ms']:.3f} ms, span {reply['span_ms']:.3f} ms, "
                    f"parent saw {parent_ms:.3f} ms")
    if not window_holds(reply):
        raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED,
                    f"said the device was done before it was: call {reply['ms']:.3f} ms and gap "
                    f"{reply.get('gap_ms', 0.0):.3f} ms on the device, {reply['window_ms']:.3f} ms from the gate's "
                    "opening to its \"done\"")
    bad = check_output_meta(reply["meta"], sz.out_shape, card.output_dtype,
                            reply["meta"].get("device", "").split(":")[0] == slot.device.split(":")[0])
    if bad:
        raise _built_instead(g, Floor(Status.WRONG_OUTPUT, bad.reason_code, bad.detail), "gave a wrong output")
    if reply.get("foreign_stream"):
        raise Floor(Status.CHEAT_FLAGGED, Reason.TIMING_ESCAPED,
                    f"launched {', '.join(reply['foreign_stream'][:5])} on a stream other than the caller's: "
                    "work must be ordered on the stream the kernel is called on")
    if reply.get("l2_persisting_bytes"):
        raise Floor(Status.CHEAT_FLAGGED, Reason.L2_PERSISTING,
                    f"reserved {reply['l2_persisting_bytes']} bytes of persisting L2 or an access-policy window, "
                    "which survive the cache flush between timed calls")
    if g.req.language == "triton":
        if not any(k.startswith("candidate:") for k in reply.get("launches", {})):
            raise Floor(Status.CHEAT_FLAGGED, Reason.NO_OWN_KERNEL,
                        "a Triton candidate ran without launching any of its own @triton.jit kernels")
        if not reply.get("own_output"):
            raise Floor(Status.CHEAT_FLAGGED, Reason.NO_OWN_KERNEL,
                        "no @triton.jit kernel of the candidate was given the output it returned: its own kernels "
                        "must write the answer")
    g.kernels.extend(k.partition(":")[2] for k in reply.get("launches", {}))  # a key without one names nothing
    return reply


def _watch(g: _Grade, conn: WorkerConn, on: bool) -> list[dict]:
    """Open (on) or close the observation of a worker's calls (grader/observe.py); closing returns its
    record per call. The twin's is opened and closed at the same points as the candidate's and not judged."""
    with _part(g, "observation, opened" if on else "observation, closed"):
        return _watched(g, conn, on)


def _watched(g: _Grade, conn: WorkerConn, on: bool) -> list[dict]:
    if conn is not g.conn:
        t = time.monotonic()
        try:
            reply, _, _ = conn.request({"op": "watch", "on": on, "report": False}, EXPERT_TIMEOUT_S)
        except (OSError, wire.WireError) as e:
            g.slot.drop_expert(g.task.expert_key)
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the expert's worker died: {e}") from None
        g.waited_s += time.monotonic() - t  # the twin's time is the grader's, not the attempt's
        conn.drain_audit()
        if not reply.get("ok") and on:
            g.slot.drop_expert(g.task.expert_key)
            raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the expert's observation failed: {_tail(reply.get('error', ''))}")
        return []
    reply, _, _ = _request(conn, {"op": "watch", "on": on}, g.remaining)
    _check_guards(conn, reply, g.slot)
    if not reply.get("ok"):
        raise Floor(Status.RUNTIME_ERROR, Reason.EXCEPTION, f"the observation of the calls failed: "
                                                             f"{_tail(reply.get('error', ''))}")
    return reply.get("calls", [])


_CODEGEN_RECORDS = ("Torch-Compiled Region", "## Call CompiledFxGraph", "CompiledFxGraph", "inductor", "dynamo",
                    "TorchDynamo")
"""Records a compiled region leaves where its ops would be: code torch generated, which no op rule can judge.
A `torch.compile`d softmax on torch 2.13's CPU wheel records `Torch-Compiled Region: 0/0`, `TorchDynamo Cache
Lookup` and `## Call CompiledFxGraph <hash> ##`, and none of its aten ops."""


def _base_op(op: str) -> str:
    """An op's name without its in-place or out-variant mark: `aten::cumsum_` is `aten::cumsum`."""
    return op.removesuffix("_out").rstrip("_") if "::" in op else op


def _built_instead(g: _Grade, floor: Floor, what: str) -> Floor:
    """`floor`, earned by a cuda candidate whose own extension failed to build at load and that went on with other
    code (CUDA-L1's attempts catch the build error and call PyTorch): a build failure, whichever of that code's faults
    was found first (`what` it did: a rule broken, a wrong output). Same floor, one label: CUDA-L1's L1:T50, whose
    torch.prod fallback overflows on some inputs, was floored for a rule in H100 run 93 and for a non-finite output
    in run 94. Any other candidate's floor is returned as it is."""
    if g.req.language == "cuda" and g.build_failed:
        return Floor(Status.COMPILE_ERROR, Reason.COMPILE,
                     f"its own extension failed to build at load ({g.build_failed[-300:]}), and what ran instead "
                     f"{what}: {floor.reason}")
    return floor


def _judge_observed(g: _Grade, sz: _Size, calls: list[dict]) -> None:
    """Every call of the size, as the observation saw it. The library rules apply to every call; the rules on
    kernels (own kernels, library kernels, streams, trips through the host) to the call whose device was traced
    (`_time_size` draws it after the check calls)."""
    card, lang = g.task.card, g.req.language
    allowed = pytorch_allowed(card) if lang == "pytorch" else STRUCTURAL_OPS | set(card.own_kernel_ops)
    forbidden = {_base_op(op) for op in card.forbidden_ops}

    def fallback(reason: Reason, text: str) -> Floor:
        """A rule on what computed the answer, broken: a cheat, unless what broke it ran instead of an extension
        that failed to build (`_built_instead`: 7 of 12 CUDA-L1 L1 attempts on the H200, run 29)."""
        return _built_instead(g, Floor(Status.CHEAT_FLAGGED, reason, text), "broke a rule")

    for n, call in enumerate(calls):
        where = f"call {n + 1} of size {sz.label} ({call.get('tag') or '?'})"
        if not call.get("seen") or not call.get("returned"):
            raise Floor(Status.CHEAT_FLAGGED, Reason.INTERPRETER_STATE,
                        f"{where} ran unrecorded: the recording of ops was switched off "
                        f"{'for the whole worker' if not call.get('seen') else 'on the candidate thread'}; "
                        "every call is observed, and the observation may not be turned off")
        ops = {op for op in call.get("ops", []) if "::" in op or op.startswith(_CODEGEN_RECORDS)}
        generated = sorted(op for op in ops if op.startswith(_CODEGEN_RECORDS))
        if generated:
            raise Floor(Status.CHEAT_FLAGGED, Reason.LIBRARY_COMPUTE,
                        f"{where} ran code torch generated ({', '.join(generated[:3])}), which records none of the ops "
                        "it computes: no rule of the task could judge it")
        hit = sorted(op for op in ops if _base_op(op) in forbidden)
        if hit:
            raise fallback(Reason.FORBIDDEN_OP, f"{where} called {', '.join(hit)}, the library op that does the whole task")
        extra = sorted(op for op in ops if allowed is not None and op not in allowed)
        if extra and lang == "pytorch":
            raise Floor(Status.CHEAT_FLAGGED, Reason.FORBIDDEN_OP,
                        f"{where} called {', '.join(extra[:6])}: a PyTorch candidate of {card.task_id} may compute "
                        f"with {', '.join(card.pytorch_ops)} ops only, never a library op that does a part of the "
                        "task's work for it")
        if extra:
            raise fallback(Reason.LIBRARY_COMPUTE,
                           f"{where}: a {lang} candidate computed with library ops {', '.join(extra[:6])}: only "
                           "memory, layout and dtype ops are allowed beside its own kernels")
        if call.get("tag") == "check" or not call.get("kernels"):  # kernel rules: the traced call
            continue
        if call.get("foreign"):
            raise Floor(Status.CHEAT_FLAGGED, Reason.TIMING_ESCAPED,
                        f"{where} launched {', '.join(call['foreign'][:5])} on a stream other than the caller's: "
                        "work must be ordered on the stream the kernel is called on")
        kernels = call.get("kernels", [])
        if lang in ("cuda", "triton") and kernels and not ran_own_kernel(g.own_kernels, kernels, lang == "triton"):
            seen = ", ".join(k[:60] for k in kernels[:4])
            raise fallback(Reason.NO_OWN_KERNEL,
                           f"{where}: a {lang} candidate ran none of the {len(g.own_kernels)} kernels it declares "
                           f"({', '.join(g.own_kernels[:4])}); the device ran only {seen}")
        through_host = [k for k in kernels if "DtoH" in k or "HtoD" in k]
        if (lang != "pytorch" or allowed is not None) and any("DtoH" in k for k in through_host) \
                and any("HtoD" in k for k in through_host):
            raise fallback(Reason.LIBRARY_COMPUTE,
                           f"{where} copied data to the host and back ({', '.join(through_host[:2])}): the answer "
                           "is computed on the device, by the candidate's own kernels or the ops its task allows")
        if lang in ("cuda", "triton") and not card.own_kernel_ops:
            lib = library_kernels(g.own_kernels, kernels, lang == "triton")
            if lib:
                raise fallback(Reason.LIBRARY_COMPUTE,
                               f"{where}: the device ran library kernels beside the {lang} candidate's own: "
                               f"{', '.join(k[:80] for k in lib[:3])}; an own-kernel candidate's calls may run its "
                               "own kernels and memory movement only")
        g.kernels.extend(kernels)


def _no_piece(label: str = ""):
    """What a piece of a verification takes when its caller holds the device for the whole: nothing."""
    return contextlib.nullcontext()


def _verify(g: _Grade, sz: _Size, idx: int, seed: int, with_inputs: bool, piece: Callable = _no_piece) -> Verdict:
    """Fetch output `idx` (and with its inputs: they must be unchanged), compare it with the reference's answer for
    `seed`; the verdict. `piece(label=...)`: what each piece of device work takes (the fetch, the inputs, the
    reference, the comparison; `Effort.check_windows`), nothing when the caller holds the device for the whole;
    `label` names the piece where device windows wait on it. Each piece ends with the device idle for this process:
    a copy onto the device and a comparison's answer wait for their work."""
    task, slot = g.task, g.slot
    host = g.effort.host_verify
    on = "cpu" if host else slot.device  # where the output, the inputs and the answer are compared
    t_fetch = time.perf_counter()
    tensors = _fetch(g, idx, with_inputs, on, piece(label="fetch"))
    fetched = time.perf_counter() - t_fetch
    g.phases["transfer"] += fetched
    g.gpu_lock.note("verify: fetch", fetched)
    t_ref = time.perf_counter()
    if with_inputs:  # the tensors among the inputs (a Python number cannot be changed in place)
        def unchanged(inputs: list) -> None:
            returned = tensors[1:]
            if len(returned) != len(inputs) or any(not _same(a, b) for a, b in zip(returned, inputs)):
                raise Floor(Status.CHEAT_FLAGGED, Reason.INPUT_MUTATED, f"inputs changed by the call at size {sz.key}")

        with piece(label="inputs"):  # drawn again on the device (its generator's), read back for the host's check
            t_in = time.perf_counter()
            inputs = (_given_tensors(g, sz, seed, on) if sz.given else
                      [t.to(on) for t in make_inputs(sz.specs, seed, slot.device) if not isinstance(t, (int, float))])
            if not host:
                unchanged(inputs)
        if host:
            unchanged(inputs)
        g.gpu_lock.note("verify: inputs", time.perf_counter() - t_in)
    keep = None
    with contextlib.ExitStack() as held:
        kept = _kept_answer(g, sz, seed)
        conn, gated, moved = None, False, ""
        if kept is None:  # the reference's worker gives back another size's memory now, in no window
            conn = _reference_conn(g)
            moved = _new_size(conn, sz)
            _trim(g, conn, sz.key)
            gated = _gates_answer(g, conn, sz)
        if not gated and not (host and kept):  # on the host a kept answer is read where it is kept: no window
            held.enter_context(piece(label="kept answer and compare" if kept else "reference" + moved))
        t = time.perf_counter()
        # Gated, the answer's device work takes a window of its own (`Effort.gated_reference`), and its copy onto this
        # device and the comparison share the next; on the host, the copy and the comparison need none.

        def outside(seconds: float) -> None:
            """A reference out of memory waits with the device given back: the memory it lacks is other slots'."""
            held.close()
            time.sleep(seconds)
            held.enter_context(piece(label="reference, asked again"))

        ref, scale, keep = _reference(
            g, sz, seed, kept, conn, window=(lambda kind: piece(label="reference, gated")) if gated else None,
            read_hold=(lambda: None if host else held.enter_context(piece(label="reference's copy and compare")))
            if gated else None, device=on, answered=held.close if host else None, wait=outside)
        g.gpu_lock.note("verify: kept answer" if kept else "verify: reference, gated" if gated else "verify: reference",
                        time.perf_counter() - t)
        if kept is None and not gated:  # a kept answer's copy is short: its comparison shares its hold, a computed
            held.close()                # one's takes its own (on the host, none)
            if keep is not None:
                keep()
                keep = None
            if not host:
                held.enter_context(piece(label="compare"))
        t = time.perf_counter()
        atol, rtol = task.card.tolerance()
        verdict = compare(tensors[0], ref, atol, rtol, scale)
        if verdict.reason_code is Reason.MISMATCH and math.isfinite(verdict.max_rel_err):
            # Outside the card's bound: is it honest arithmetic? The expert, on the same inputs, says how far it gets.
            # Its calls take pieces of their own, not the comparison's: its first at a size (a size's first check
            # call's mismatch comes before the expert's warm-up) compiles, in no window, as `_check_size`'s does.
            # In the comparison's window, that compile held every slot's timed calls off (H100 run 78: 311 of the
            # check windows' comparisons took 40 ms on average, and run 71's 19 expert outputs 491 ms each).
            held.close()
            with _part(g, "expert's output, for its slack"):
                expert = _expert_worker(g)
                if sz.key not in expert.warmed:
                    _expert_warmup(g, expert, sz)
                with piece(label="expert's output"):  # its call, its fetch, and the slack's arithmetic
                    slack = expert_slack(_expert_output(g, sz, seed, on), ref, rtol)
            if slack > 0:
                with contextlib.nullcontext() if host else piece(label="compare"):
                    verdict = compare(tensors[0], ref, atol, rtol, scale, slack)
                g.slack_used = max(g.slack_used, slack) if verdict.ok else g.slack_used
        g.gpu_lock.note("verify: compare", time.perf_counter() - t)
    if keep is not None:  # a gated answer's: kept once no window is held
        keep()
    g.phases["reference"] += time.perf_counter() - t_ref
    return verdict


def _fetch(g: _Grade, idx: int, with_inputs: bool, device: str | None = None, hold=None) -> list:
    """The candidate's kept output `idx` (and its inputs), copied out of its worker into tensors of this process's on
    `device` (the slot's unless named). `hold`: what the worker's copy out takes (a window), and the copy in with it
    unless it goes to the host, where it is no device work: read after the hold, before the candidate's worker is
    asked anything again."""
    device = device or g.slot.device
    with hold if hold is not None else contextlib.nullcontext():
        read = _fetched(g, idx, with_inputs, device)
        if device != "cpu":
            return read()
    return read()


def _fetched(g: _Grade, idx: int, with_inputs: bool, device: str) -> Callable[[], list]:
    """The fetch's request (`_fetch`), checked; the read of what it handed over onto `device` (a memfd's, which the
    read closes, or the output arena's), to be made once."""
    slot = g.slot
    reply, _, _ = _request(g.conn, {"op": "fetch", "idx": idx, "with_inputs": with_inputs}, g.remaining)
    fd = wire.recv_fd(g.conn.sock) if reply.get("_fd") else None
    try:
        _check_guards(g.conn, reply, slot)
        if not reply.get("ok") and reply.get("error_kind") not in (None, "protocol"):
            # the copy failed in the worker: an error the candidate's device work left (an illegal address
            # surfaces at the next synchronising call), or no memory for the copy
            why = f"output {idx} could not be copied: {_tail(reply.get('error', ''))}"
            if reply.get("error_kind") == "oom":
                raise _oom(g, why)
            raise Floor(Status.RUNTIME_ERROR, Reason.EXCEPTION, why)
        if not reply.get("ok") or (fd is None and reply.get("arena") is not True):
            raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED, f"worker refused to hand over output {idx}: "
                                                                     f"{_tail(reply.get('error', '')) if reply.get('error') else 'no reason given'}")
    except Floor:
        if fd is not None:
            os.close(fd)
        raise

    def read() -> list:
        try:
            if fd is not None:
                return wire.tensors_from_memfd(reply["tensors"], fd, device)
            if g.conn.out_arena is not None:  # copied out before any candidate code can run again
                return g.conn.out_arena.read(reply["tensors"], device)
            raise wire.WireError("it answered in an arena it was never lent")
        except (wire.WireError, OSError, ValueError, TypeError, AttributeError, KeyError) as e:
            raise Floor(Status.CHEAT_FLAGGED, Reason.BAD_OUTPUT, f"worker sent an unreadable output: {e}") from None

    return read


def _note_parts(g: _Grade, purpose: str, reply: dict, parts: tuple = ("park", "inputs", "call", "check", "rest")
                ) -> None:
    """Count a worker's reply's `parts_ms` (where its side of a request went) in the device lock's stats under
    "`purpose`: part", beside the parent's round trip, where it says (the acceptance's breakdown of check work)."""
    got = reply.get("parts_ms")
    if isinstance(got, list) and len(got) == len(parts) and all(type(ms) in (int, float) for ms in got):
        for name, ms in zip(parts, got):
            g.gpu_lock.note(f"{purpose}: {name}", float(ms) / 1e3)
    if isinstance(reply.get("parent_ms"), (int, float)):
        g.gpu_lock.note(f"{purpose}: round trip", reply["parent_ms"] / 1e3)


def _expert_output(g: _Grade, sz: _Size, seed: int, device: str | None = None):
    """The expert's output on the inputs of `seed`: one call kept, fetched onto `device` (the slot's unless named),
    then released. Its time is the grader's, not the attempt's."""
    expert = _expert_worker(g)
    reply = _expert_call(g, expert, sz, seed, keep=True)
    t = time.monotonic()
    fd = None
    try:
        got, _, _ = expert.request({"op": "fetch", "idx": reply["idx"], "with_inputs": False}, EXPERT_TIMEOUT_S)
        fd = wire.recv_fd(expert.sock) if got.get("_fd") else None
        if not got.get("ok") or fd is None:
            raise RuntimeError(_tail(got.get("error", "")) if got.get("error") else "no output")
        out, fd = wire.tensors_from_memfd(got["tensors"], fd, device or g.slot.device)[0], None
        expert.request({"op": "release"}, EXPERT_TIMEOUT_S)
    except (OSError, wire.WireError, RuntimeError, ValueError, TypeError, KeyError, IndexError) as e:
        if fd is not None:
            os.close(fd)
        g.slot.drop_expert(g.task.expert_key)
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the expert's output could not be read at size {sz.label}: "
                                                      f"{e}") from None
    finally:
        g.waited_s += time.monotonic() - t
    return out


def _reference_worker(g: _Grade) -> WorkerConn:
    """The task's sandboxed reference worker (kept per slot); it also makes a task's own inputs."""
    return _reference_of(g.slot, g.task)


def _one_worker(slot: Slot, task) -> bool:
    """The task's expert twin and reference are one kept worker (`Slot.task`): the slot's `task_workers`, for a task
    whose two come from one author (`SealedTask.one_author`)."""
    return slot.task_workers and task.one_author


def _reference_of(slot: Slot, task, aside: bool = False) -> WorkerConn:
    """The task's reference worker, or its one worker (`_one_worker`), which serves its expert twin too."""
    card = task.card
    inputs_entry = "get_inputs" if card.inputs_from == "task" else None
    if _one_worker(slot, task):
        return slot.task(task.expert_key, card.expert, card.reference, card.error_scale, EXPERT_TIMEOUT_S,
                         task.answer_bytes, inputs_entry, aside=aside, kernels=task.expert_kernels())
    return slot.reference(task.expert_key, card.reference, card.error_scale, EXPERT_TIMEOUT_S, task.answer_bytes,
                          inputs_entry, aside=aside)


def _start_ahead(slot: Slot, task) -> None:
    """`Effort.start_ahead`: the task's reference and expert workers start now, each on a thread of its own, booting
    on the cores no slot is given (`Slot.start_ahead`), beside the candidate's start and load instead of one after the
    other inside its correctness phase (H200 run 66: 78 reference and 68 expert workers started, 2.7 s each)."""
    if _one_worker(slot, task):  # one worker serves both
        slot.start_ahead(lambda: _reference_of(slot, task, aside=True))
        return
    slot.start_ahead(lambda: _reference_of(slot, task, aside=True),
                     lambda: slot.expert(task.expert_key, task.card.expert, EXPERT_TIMEOUT_S, aside=True,
                                         kernels=task.expert_kernels()))


def _kept_answer(g: _Grade, sz: _Size, seed: int) -> Answer | None:
    """The pool's kept answer for `seed` at this size (`grader.answers`), when `seed` is a pool seed with one and
    the task-made inputs (if any) it was computed on are the ones this attempt handed out; else None."""
    if g.answers is None or seed not in sz.plan.pool:
        return None
    kept = g.answers.get(g.task.expert_key, sz.key, seed)
    return kept if kept is not None and (not sz.given or kept.digest == g.digests.get(seed)) else None


def _reference_conn(g: _Grade) -> WorkerConn:
    """`_reference_worker`, a failure to start or load it the grader's (infra_error), as in `_reference`."""
    try:
        return _reference_worker(g)
    except (OSError, wire.WireError, RuntimeError, ValueError) as e:
        g.slot.drop_reference(g.task.expert_key)
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the task's reference failed in its sandbox: {e}") from None


REFERENCE_OOM_TRIES = 3
REFERENCE_OOM_WAIT_S = 0.5
"""A reference that runs out of device memory is asked again after this wait, up to `REFERENCE_OOM_TRIES` calls."""


def _answered_with_room(g: _Grade, conn: WorkerConn, msg: dict, wait: Callable[[float], None]
                        ) -> tuple[dict, float, float]:
    """The reference worker's reply to `msg`, its round trip (ms) and the seconds spent waiting. One that ran out of
    device memory is asked again after `wait(REFERENCE_OOM_WAIT_S)`, up to `REFERENCE_OOM_TRIES` calls in all: the
    memory it lacked is most often other slots' candidates', given back as their grades end (H100 run 96: an honest
    attempt's grade ended infra_error when its task's reference, 12.9 GiB of float64 attention, found 3.2 GiB of 79
    free). `_verify`'s `wait` gives the device's window back meanwhile, so the other slots go on. A reference that runs
    out every time fails the grade as before, its error the last one; any other error is not asked again."""
    reply, _, parent_ms = conn.request(msg, EXPERT_TIMEOUT_S)
    waited = 0.0
    for _ in range(REFERENCE_OOM_TRIES - 1):
        if reply.get("error_kind") != "oom":
            break
        t = time.perf_counter()
        wait(REFERENCE_OOM_WAIT_S)
        spent = time.perf_counter() - t
        waited += spent
        g.gpu_lock.note("reference worker: out of memory, asked again", spent)
        reply, _, parent_ms = conn.request(msg, EXPERT_TIMEOUT_S)
    return reply, parent_ms, waited


def _new_size(conn: WorkerConn, sz: _Size) -> str:
    """", at a size new to its worker" when the reference worker's last answer was at another size (or it has none):
    this answer allocates its memory afresh, in its window; else "". A label's suffix in the lock's stats."""
    return ", at a size new to its worker" if conn.answered != sz.key else ""


def _gates_answer(g: _Grade, conn: WorkerConn, sz: _Size) -> bool:
    """Whether the reference's next answer at this size goes through its worker's launch gate
    (`Effort.gated_reference`): on a GPU, with a gate, on drawn inputs (a task's own come from the host, whose copy
    waits for the device), once the worker's last answer was at this size (its memory and kernels are then ready:
    an allocation or a kernel's first load behind the closed gate waits for the parent's patience, H200 runs 41 and
    63), and never again for a worker whose gated answer stalled. Only a reference written here (`SealedTask.ours`):
    a gated reference runs its Python in no window, so a kernel a corpus reference put on a stream of its own, or
    queued behind a gate it opened itself, would run beside another slot's timed call; ungated, its whole answer,
    the worker's synchronise of every stream included, is inside its window."""
    return (g.effort.gated_reference and g.cuda and g.task.ours and conn.gate is not None and not sz.given
            and conn.arena is not None and conn.arena.pinned and conn.answered == sz.key and not conn.gate_stalled)


def _reference(g: _Grade, sz: _Size, seed: int, kept: Answer | None, conn: WorkerConn | None, window=None,
               read_hold=None, device: str | None = None, answered=None, wait=time.sleep) -> tuple:
    """The reference's float64 answer (and error scale) for the inputs of `seed` on the device, and what keeps it in
    the pool (a callable, or None). `kept` (`_kept_answer`): taken onto the device instead. Else the task's
    sandboxed reference worker computes it; a pool seed's answer is then kept in page-locked host memory, copied
    there from the reference's arena by the returned callable, which the caller runs once it holds no window (a
    host copy, no device work) and before the worker answers again. The time is the grader's, not the attempt's.
    The arena is not sealed against writes: the reference could change what is kept, but it defines the answers
    anyway. `conn`: the reference's worker (`_reference_conn`), when no answer is kept. `window` (gated,
    `_gates_answer`): what the answer's device work takes, from the gate's opening to "done"; `read_hold()` then takes
    the window the answer's copy onto this device needs. `device`: where the answer goes (the slot's unless named; the
    host's for `Effort.host_verify`); `answered()`: called once the worker has answered, before its answer is read
    (to end the window its request took, when the read is no device work). `wait(seconds)`: how an ungated answer
    that ran out of device memory waits to be asked again (`_answered_with_room`)."""
    key, device = g.task.expert_key, device or g.slot.device
    if kept is not None:
        sz.answers["kept"] += 1
        t = time.perf_counter()
        ref, scale = kept.ref.to(device), (kept.scale.to(device) if kept.scale is not None else None)
        g.waited_s += time.perf_counter() - t  # the grader's time, as the reference's is
        return ref, scale, None
    pooled = g.answers is not None and seed in sz.plan.pool
    t = time.perf_counter()
    fd = None
    try:
        mark = conn.answer_audit_mark()
        msg = {"op": "reference", "specs": sz.specs, "seed": seed, "task_inputs": sz.given, "key": sz.key}
        if window is None:
            reply, parent_ms, waited = _answered_with_room(g, conn, msg, wait)
            reply["parent_ms"] = parent_ms  # the round trip, beside the worker's own parts in the lock's stats
        else:
            reply, _, _ = conn.request({**msg, "gated": True, "fill_behind": True}, EXPERT_TIMEOUT_S, window=window)
            # Its answer waited for the device behind its gate, or it could not be gated (it did no device work
            # then): its answers go ungated from now on, this one in the window its copy takes.
            conn.gate_stalled = bool(reply.get("stalled")) or reply.get("error_kind") == "gate"
            read_hold()
            if reply.get("error_kind") == "gate":
                reply, _, _ = conn.request(msg, EXPERT_TIMEOUT_S)
        fd = wire.recv_fd(conn.sock) if reply.get("_fd") else None
        if answered is not None:
            answered()
        if sz.given and reply.get("ok") and reply.get("inputs_digest") != g.digests.get(seed):
            raise RuntimeError(f"at size {sz.label}: its get_inputs made other inputs for the same seed than the "
                               "candidate was given: it must depend only on torch's, random's or NumPy's seeded "
                               "generators")
        in_arena = reply.get("arena") is True and fd is None
        if not reply.get("ok") or (fd is None and not in_arena) or conn.drain_audit()[mark:]:
            why = reply.get("error") or "; ".join(conn.audit_lines[mark:mark + 3]) or "no output"
            raise RuntimeError(f"at size {sz.label}: {_tail(why)}")
        if in_arena:
            if conn.arena is None:
                raise RuntimeError("answered in an arena it was never lent")
            t_read = time.perf_counter()
            tensors = conn.arena.read(reply["tensors"], device)
            g.gpu_lock.note("reference worker: read onto this side's " + ("host" if device != g.slot.device else
                                                                           "device"), time.perf_counter() - t_read)
            g.answers_via = "arena, pinned" if conn.arena.pinned and reply.get("arena_pinned") else "arena"
        else:
            tensors, fd = wire.tensors_from_memfd(reply["tensors"], fd, device), None
            why = reply.get("arena_error") or ("no arena lent" if conn.arena is None else "answer larger than the arena")
            g.answers_via = f"memfd ({_tail(str(why), 200)})"
        if len(tensors) != 1 + bool(reply.get("scaled")):
            raise RuntimeError(f"sent {len(tensors)} tensors")
        moved = _new_size(conn, sz)  # its parts counted apart: H200 run 80 held 215 ms a window for these
        conn.trimmed = conn.answered = sz.key  # the worker's memory is this size's now
        _note_parts(g, "reference worker" + moved, reply, ("empty cache", "inputs", "run", "check", "write"))
        # What keeping the answer saves the next attempt (`AnswerPool.put`), on this side's clock: the window it held
        # (ungated: the whole request, taken in the caller's window; gated: the gate's opening to "done").
        cost_s = (reply["window_ms"] / 1e3 if window is not None and "window_ms" in reply
                  else time.perf_counter() - t - (waited if window is None else 0.0))
    except (OSError, wire.WireError, RuntimeError, ValueError, TypeError, KeyError, AttributeError) as e:
        if fd is not None:
            os.close(fd)
        g.slot.drop_reference(key)
        raise Floor(Status.INFRA_ERROR, Reason.INFRA, f"the task's reference failed in its sandbox: {e}") from None
    finally:
        g.waited_s += time.perf_counter() - t
    sz.answers["computed"] += 1
    ref, scale = tensors[0], (tensors[1] if len(tensors) > 1 else None)
    if not pooled:
        return ref, scale, None
    if g.waiting is not None:  # asked before the copy, which is most of what keeping costs
        nbytes = (sum(int(m["nbytes"]) for m in reply["tensors"]) if in_arena
                  else sum(t.numel() * t.element_size() for t in tensors))
        if not g.answers.admit(key, sz.key, seed, nbytes, cost_s, wanted=g.waiting()):
            return ref, scale, None
    digest = reply.get("inputs_digest") if sz.given else None
    if not in_arena:  # an answer past the arena's size (rare): copied back from the device, in the caller's window
        g.answers.put(key, sz.key, seed, Answer(kept_copy(ref), kept_copy(scale), digest), cost_s)
        return ref, scale, None
    arena, metas = conn.arena, reply["tensors"]

    def keep() -> None:  # read on the host already (tensors of this side's own), it is kept as read
        host = tensors if device == "cpu" else arena.read(metas, "cpu", pin=True)
        g.answers.put(key, sz.key, seed, Answer(host[0], host[1] if len(host) > 1 else None, digest), cost_s)

    return ref, scale, keep


def _request(conn: WorkerConn, msg: dict, remaining, payload: bytes = b"", fd: int | None = None, window=None,
             whole: bool = False, released=None, quiet=None) -> tuple[dict, bytes, float]:
    return conn.request(msg, remaining(), payload, fd, window=window, whole=whole, released=released, quiet=quiet)


def _quiet(g: _Grade, what: str):
    """What waits for the reply to `what` (the attempt's load, or its first call) under `Effort.hang_watch`
    (`WorkerConn.request(quiet=)`): a timeout once the worker has moved no count of work for `Effort.hang_idle_s`,
    and the grade's floor at the first line its audit channel carries (a reach, a thread, a hook: any line floors the
    grade however the call ends, `_check_guards` and the grade's end, so the rest of a compile is not waited for).
    None with the watch off."""
    if not g.effort.hang_watch:
        return None
    watch = g.hang_watched[what] = hangwatch.Watch(g.conn.pid, g.effort.hang_idle_s)

    def wait(sock) -> None:
        audit = g.conn.audit
        while True:
            if not watch.wait(sock, g.remaining(), also=audit):
                how = "spun" if watch.running else "waited for what nothing did"
                raise Floor(Status.TIMEOUT, Reason.TIMEOUT,
                            f"its {what} made no progress for {watch.idle_s:.0f} s of its {g.req.timeout_s:.0f} s "
                            f"budget: its worker {how}, and faulted in, read, wrote and started nothing")
            if audit is not None:
                _audit_check(g.conn)
            if audit is None or select.select([sock], [], [], 0)[0]:
                return
            audit = None  # woken by a channel that closed, with nothing on it: read no more (the grade's end judges)
    return wait


def _offer(cache: compile_cache.CompileCache, source: str, env: compile_cache.BuildEnv) -> tuple[list, bytes]:
    try:
        return cache.offer(source, env)
    except OSError:  # an unreadable cache costs a compile, never the grade
        return [], b""


def _ext_record(cache: compile_cache.CompileCache, source: str, env, use: bool, offer: list, reply: dict,
                built: bytes) -> dict:
    """File the worker's new builds under this program's binding; describe what the cache did.

    `filed` is the parent's own count; `served` and `built` are what the worker says it took from the
    offer and compiled (`served` is bounded by the offer, but the candidate's interpreter wrote both)."""
    filed = 0
    if use and reply.get("ext_built"):
        try:
            filed = len(cache.accept(source, env, reply["ext_built"], built))
        except OSError:  # a full or broken cache disk costs the next attempt a compile, never this grade
            filed = 0
    offered = {m.get("material_sha256") for m in offer}
    claimed = reply.get("ext_served") if isinstance(reply.get("ext_served"), list) else []
    replayed = reply.get("ext_replayed") if isinstance(reply.get("ext_replayed"), list) else []
    failed = [f[:800] for f in reply.get("ext_failed", []) if isinstance(f, str)][:3] \
        if isinstance(reply.get("ext_failed"), list) else []
    return {**({"offered_materials": sorted(f"{str(m.get('material_sha256'))[:8]}:{_entry_kind(m)}" for m in offer)}
               if offer else {}),
            "served": len({d for d in claimed if isinstance(d, str) and d in offered}),
            **({"replayed": n} if (n := len({d for d in replayed if isinstance(d, str) and d in offered})) else {}),
            "built": len(reply["ext_built"]) if isinstance(reply.get("ext_built"), list) else 0, "filed": filed,
            **({"failed": failed} if failed else {}),
            **({"compiled": c} if (c := compile_cache.summaries(reply.get("ext_compiled"))) else {})}


def _entry_kind(meta: dict) -> str:
    """An offered entry's kind, for the record: a build's binary or a failure's text."""
    return "failure" if meta.get("module_file") == compile_cache.FAILURE_FILE else "build"


OOM_EVIDENCE_S = 2.0
"""How far back before a candidate's out-of-memory reply a full reading of the device counts as its evidence."""


def oom_floor(memory: dict | None, slots: int, text: str, earlier: Iterable[dict] = ()) -> Floor:
    """What a candidate's out-of-memory error makes of its grade. Its own fault (runtime_error) unless one of the
    parent's own readings (NVML: `memory`, just after, `DeviceWatch.memory`; `earlier`, the device's full readings
    of the last `OOM_EVIDENCE_S`, `DeviceWatch.full_since`) shows the device full (`devicewatch.is_full`) and the
    candidate holding less than its share of it (the device's memory over the `slots` sharing it): then the other
    slots' work filled it, and the grade is the grader's failure (infra_error, graded again; H200 run 56: three
    honest kernels at 4 GiB each ran out on a full device with 16 slots). The error's text is the candidate's, never
    the evidence: a candidate can raise an out-of-memory error of its own on an empty device. A candidate NVML does
    not list (its pid unseen) in a reading is judged as before on it: its own fault. The earlier readings are there
    because the one just after can find the device no longer full (H100 run 100: two honest kernels floored at 8
    slots, while nine of the same run's were judged the device's): another process gave memory back between the
    candidate's error and the reading."""
    for reading in ([memory] if memory is not None else []) + list(earlier):
        if reading["pid_used"] is None or not is_full(reading["total"], reading["free"]):
            continue
        share, held = reading["total"] / max(slots, 1), reading["pid_used"]
        if held < share:
            when = f", {reading['ago_s']:.2f} s before its error came back" if "ago_s" in reading else ""
            return Floor(Status.INFRA_ERROR, Reason.OOM,
                         f"the device ran out of memory with this attempt holding {held / 2**30:.2f} GiB, less than "
                         f"its share of {share / 2**30:.1f} GiB ({slots} slots); {reading['free'] / 2**20:.0f} MiB "
                         f"of {reading['total'] / 2**30:.1f} GiB were free{when}: other work filled it. Grade it "
                         f"again, or with fewer slots. | {text}")
    return Floor(Status.RUNTIME_ERROR, Reason.OOM, text)


def _oom(g: _Grade, text: str) -> Floor:
    """`oom_floor` on the device's memory and the candidate's part of it, as NVML tells the parent now and as the
    watch saw it full in the last `OOM_EVIDENCE_S`."""
    if g.watch is None:
        return oom_floor(None, g.slot.slots, text)
    earlier = g.watch.full_since(OOM_EVIDENCE_S, g.conn.pid)  # before the reading after, which it would also keep
    return oom_floor(g.watch.memory(g.conn.pid), g.slot.slots, text, earlier)


def _check_guards(conn: WorkerConn, reply: dict, slot: Slot) -> None:
    """Checks made after every reply: from outside the candidate's interpreter (its audit channel, its
    threads and processes), and what the worker's own checks found (interpreter state, signal handlers)."""
    _audit_check(conn)
    if conn.audit_target is not None and sandbox.fd_target(conn.pid, conn.hello["audit_fd"]) != conn.audit_target:
        raise Floor(Status.CHEAT_FLAGGED, Reason.AUDIT_CHANNEL,
                    "replaced or closed the worker's audit channel, which reports its reaches")
    if reply.get("interpreter"):
        raise Floor(Status.CHEAT_FLAGGED, Reason.INTERPRETER,
                    f"changed the worker's interpreter: {', '.join(map(str, reply['interpreter'][:6]))}")
    if reply.get("tampered"):
        raise Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED,
                    f"replaced grader clocks or hooks: {', '.join(reply['tampered'])}")
    logged = max(sandbox.fd_size(conn.pid, 1), sandbox.fd_size(conn.pid, 2))
    if logged > OUTPUT_LOG_CAP:
        raise Floor(Status.RUNTIME_ERROR, Reason.OUTPUT_FLOOD,
                    f"printed {logged >> 20} MiB; a worker's output log holds at most {OUTPUT_LOG_CAP >> 20} MiB")
    extra_threads = sandbox.thread_count(conn.pid) - conn.baseline_threads
    if extra_threads > 0:
        raise Floor(Status.CHEAT_FLAGGED, Reason.THREADS, f"{extra_threads} thread(s) left running after the call")
    others = [p for p in (sandbox.uid_pids(conn.uid) if conn.uid is not None else sandbox.child_pids(conn.pid))
              if p != conn.pid]
    if others:
        raise Floor(Status.CHEAT_FLAGGED, Reason.THREADS, f"{len(others)} process(es) left running after the call")


def _audit_check(conn: WorkerConn) -> None:
    """The floor of a candidate whose audit channel has carried any line: its first line says why."""
    if conn.drain_audit():
        raise _audit_floor(conn.audit_lines[0])


def _audit_floor(line: str) -> Floor:
    kind, _, what = line.partition("\t")
    if kind == "threads":
        return Floor(Status.CHEAT_FLAGGED, Reason.THREADS, f"the candidate {what} (work outside the timed call)")
    if kind == "clock":
        return Floor(Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED, f"the candidate {what}")
    if kind == "l2":
        return Floor(Status.CHEAT_FLAGGED, Reason.L2_PERSISTING, f"the candidate {what} (threat 14)")
    if kind == "interp":
        return Floor(Status.CHEAT_FLAGGED, Reason.INTERPRETER,
                     f"the candidate {what}: it would run code inside the grader's own (the call boundary)")
    return Floor(Status.CHEAT_FLAGGED, Reason.SANDBOX_VIOLATION, f"sandbox: {what}")


def _same(a, b) -> bool:
    import torch

    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b.to(a.device)))


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _tail(text: str, n: int = 600) -> str:
    """The first line and the last two (a traceback's head and its error), each once."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines if len(lines) <= 3 else lines[:1] + lines[-2:])[:n] or "no detail"


def _tolerances(card: TaskCard, slack: float) -> dict:
    """The bound a grade applied: the card's atol/rtol and, when an output needed it, the largest absolute
    allowance the expert's own error on the same inputs granted (`compare.expert_slack`)."""
    atol, rtol = card.tolerance()
    return {"atol": atol, "rtol": rtol, "dtype": card.output_dtype, "expert_slack": slack,
            "expert_slack_factor": EXPERT_SLACK}
