"""The GPU acceptance run of the sealed grader: one command, one device, a verdict table.

    python3 bench/gpu_acceptance.py --out DIR [--workers 6] [--budget-s 300] [--hard-stop-s 440]

Needs only what a bare GPU image has (torch, triton, nvidia-ml-py, the standard library): no
Dagster, no install step. It grades in rounds (`ROUNDS`): first the throughput mix (`--demo N` attempts of
the demo corpus and `--cuda-l1 N`), then the verdicts, so that a run cut off early still covers every group:
the GPU-only planted cheats (each must land at the floor in every repeat), the call-boundary escapes
(once each), the honest Triton kernels (none may be floored) and every Triton expert graded as a candidate
against itself (its reward should be 0). `--cuda-l1 N` grades the first N attempts of the prepared CUDA-L1 sample
(`bench/cuda_l1_sample.py`, carried in .gpu_carry): real model-written `ModelNew` modules, mostly CUDA
through load_inline, with a table by level and status beside the speedups their authors claim.
Each grade that counts is appended to DIR/grades.jsonl the moment it arrives. A grade the grader failed
(`infra_error`) is graded again, as the pipeline's client does (`grade_round`); the tries thrown away go to
DIR/grades_retried.jsonl at the end, counted where the time went, not in the verdicts. DIR/summary.txt holds the
verdict table: cheats floored, honest floored, the experts' self-reward, repeat precision by
kernel-duration bucket with label flips, and attempts per GPU-hour.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grade_corpus import adversarial_requests, demo_requests, expert_requests  # noqa: E402
from bench.hostwatch import HostWatch, host_profile, memory_by_kind, profile_line  # noqa: E402
from bench.stacksample import StackSampler  # noqa: E402
from grader.contract import REWARD_FLOOR, GradeRequest, GradeResult, Reason, Status  # noqa: E402
from grader.labels import point_label  # noqa: E402
from grader.timing import median, median_ci  # noqa: E402
from pipelines.grading.client import GraderSpec, GradingIncomplete, grade_with_retries  # noqa: E402

BUCKETS_MS = ((0.0, 0.02, "<20 us"), (0.02, 0.1, "20-100 us"), (0.1, 1.0, "0.1-1 ms"), (1.0, math.inf, ">=1 ms"))
ROUNDS = ((("demo", 1), ("cuda_l1", 1)),
          (("expert", 1), ("expert", 2), ("cheat", 1), ("cheat", 2), ("cheat", 3), ("escape", 1), ("honest", 1),
           ("own_inputs", 1), ("cuda_own", 1)),
          (("honest", 2),))
"""(group, repeat) graded in each round. Round 1 is the throughput mix of issue #16: demo and CUDA-L1 attempts,
every kind of outcome, each once, measured as a round of its own (the fresh-interpreter baseline grades a
sample of it). Then the verdicts: the experts' two grades (their self-reward and the repeat precision), the
GPU-only cheats three times each, the call-boundary escapes (planted on CPU, proven here on a CUDA build) and the
honest kernels once; the honest kernels' repeats last. The cheats' second and third grades were round 3's until
2026-12-06: no run since H200 run 54 had reached round 3 within a device call's 9 minutes (H200 run 95: rounds 1 and
2 took 342 s after a 74 s fresh baseline), and they are 24 short grades."""


def plan(groups: set[str] | None = None, cuda_l1: int = 0, demo: int = 0
         ) -> tuple[dict[str, list[tuple[GradeRequest, dict]]], list]:
    """Requests by group, and the extra card files they need (the CUDA-L1 sample's tasks). `demo`: that many
    attempts of the demo corpus, spread over it (every kind of outcome, a hang included)."""
    items = collections.defaultdict(list)
    rows, cards = adversarial_requests(gpu_focus=True) + expert_requests(), []
    if demo:
        rows += every_kth(demo_requests(ROOT / "demo" / "attempts.jsonl"), demo)
    if cuda_l1:
        from bench.cuda_l1_sample import sample_requests

        reqs, cards, metas = sample_requests(cuda_l1)
        rows += list(zip(reqs, metas))
    for req, meta in rows:
        if groups is None or meta["group"] in groups:
            items[meta["group"]].append((req, meta))
    return items, cards


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] if s else math.nan


SWITCHES = ("reference_arena", "task_affinity", "own_root", "launch_gate", "interleave", "draw_before_gate",
            "reference_first", "output_arena", "split_window", "slow_loops", "check_windows", "device_first",
            "build_ahead", "fill_behind", "answer_pool", "spare_workers", "paired_windows", "traced_release",
            "stalled_one_pair", "gated_check_calls", "settled_pairs", "memory_watch", "task_workers",
            "fail_fast_builds", "seed_triton", "slow_checks_warm", "start_ahead", "gated_reference",
            "warmup_release", "keep_size_memory", "hang_watch", "answers_for_waiting")
"""The parts of the grader `--without` can switch off (each a `GraderService` argument; `build_ahead` off is 0
builders, on the service's default)."""

OPT_IN = ("host_verify", "first_call_early", "expert_early")
"""The parts `--with` switches on (each an `Effort` field, off by default until a GPU run has measured it)."""

SERVICE_OPT_IN = ("keep_tasks", "nice_builds", "seed_experts", "triton_key_once", "twin_apart")
"""The same for parts of the service (each a `GraderService` argument)."""


def answer_line(results: list[GradeResult]) -> str:
    """How many verifications of the timed sizes took a kept answer (`loop["answers"]`), and how many a computed one."""
    got = [(s.loop or {}).get("answers") or {} for r in results for s in r.sizes]
    kept, computed = sum(a.get("kept", 0) for a in got), sum(a.get("computed", 0) for a in got)
    return f"{kept} of {kept + computed}" + (f" ({kept / (kept + computed):.0%})" if kept + computed else "")


def hang_watch_line(results: list[GradeResult]) -> str | None:
    """What `Effort.hang_watch` saw: the grades it ended (their seconds), and the longest still stretch of every
    other request it watched (how far below `Effort.hang_idle_s` honest work stayed). None when it watched nothing."""
    watched = [(r, w) for r in results for w in (r.sandbox.get("hang_watch") or {}).values()]
    if not watched:
        return None
    ended = [(r, w) for r, w in watched if w.get("still")]

    def last(w: dict) -> str:
        """When the ended request's counts last moved, and what moved (`hangwatch.moved`), where recorded."""
        return (f" (its last change {w['last_change_s']:.1f} s in: {', '.join(w.get('last_moved') or []) or '?'})"
                if w.get("last_change_s") is not None else "")

    rest = sorted(w.get("longest_still_s", 0.0) for _, w in watched if not w.get("still"))
    return (f"  hang watch (Effort.hang_watch)\t{len(watched)} requests of {len({id(r) for r, _ in watched})} grades; "
            f"ended {len(ended)}: " + (", ".join(f"{r.attempt_id} {r.status.value} in {r.phase_seconds['total']:.1f} s"
                                               f"{last(w)}" for r, w in ended) or "none")
            + (f"; the others' longest still stretch median {statistics.median(rest):.2f} s, max {rest[-1]:.2f} s"
               if rest else ""))


def retried_line(results: list[GradeResult], retried: list[GradeResult]) -> str:
    """The tries the grader failed (`infra_error`) and the client graded again (`grade_with_retries`, as the
    pipeline's), by reason, and the grades that count that are infra_error still: they judged nothing."""
    again = [r for r in results if r.status is Status.INFRA_ERROR]
    why = collections.Counter(r.reason_code.value for r in retried)
    return (f"grades the grader failed, graded again (infra_error)\t{len(retried)}"
            + (" (" + ", ".join(f"{k} {n}" for k, n in why.most_common()) + ")" if why else "")
            + f"; no verdict (every try failed): {len(again)}")


def oom_line(results: list[GradeResult]) -> str:
    """The grades a candidate's out-of-memory error ended (`session.oom_floor`), by status, and how many of the
    device's were judged on a full reading taken before the error came back (`memory_watch`); '' when none."""
    oom = [r for r in results if r.reason_code is Reason.OOM]
    if not oom:
        return ""
    by = collections.Counter(r.status.value for r in oom)
    earlier = sum("s before its error came back" in r.reason for r in oom if r.status is Status.INFRA_ERROR)
    return ("  out of memory (session.oom_floor)\t" + ", ".join(f"{k} {n}" for k, n in sorted(by.items()))
            + f"; the device's judged on a reading before the error came back: {earlier}")


def memory_lines(svc) -> list[str]:
    """What the kept answers hold (`grader.answers`), and the device's memory as the run ends: what every process
    holds of it, and this process's (the parent, where the answers are kept) most reserved."""
    lines = []
    if svc.answers is not None:
        st = svc.answers.stats()
        lines.append(f"  kept answers (grader.answers)\t{st['answers_held']} held, {st['held_bytes'] / 2**30:.2f} of "
                     f"{svc.answers.budget_bytes / 2**30:g} GiB; used {st['answers_kept_used']} times, "
                     f"{st['answers_computed']} computed, {st['answers_dropped']} dropped"
                     + (f", {st['answers_unwanted']} not copied (no attempt of its task waiting)"
                        if svc.answers_for_waiting else ""))
    mem = svc.watch.memory(os.getpid()) if svc.watch is not None else None
    if mem is not None:
        import torch

        lines.append(f"  device memory at the end (GiB)\tused {(mem['total'] - mem['free']) / 2**30:.1f} of "
                     f"{mem['total'] / 2**30:.1f}; the parent {(mem['pid_used'] or 0) / 2**30:.1f}, its most "
                     f"reserved {torch.cuda.max_memory_reserved() / 2**30:.1f}")
        by_kind = svc.watch.memory_by_role(svc.roles())
        if by_kind is not None:
            lines.append(f"  device memory at the end by kind of process (GiB)\t{memory_by_kind(by_kind)}")
    if svc.watch is not None:
        lines.append("  the device watch's memory readings (grader.devicewatch)\t"
                     + (f"sampled {svc.watch.sampled} times" if svc.memory_watch else "not sampled (memory_watch off)")
                     + f"; full readings kept {svc.watch.full_readings()}")
    return lines


def _clip_stopped(r: GradeResult) -> list:
    """The sizes of a grade whose timing stopped early at the clip (`loop["clip_stop"]`)."""
    return [s for s in r.sizes if (s.loop or {}).get("clip_stop")]


def grade_round(svc, requests: list[GradeRequest], failed: list[GradeResult]):
    """One round's outcomes as the pipeline's client gets them (`grade_with_retries` with its default retries): an
    attempt whose grade the grader failed (`infra_error`) is graded again, and its last try counts. Every infra_error
    try is appended to `failed` as it comes; those that are not an outcome's result were thrown away."""
    def tapped(batch: list[GradeRequest]):
        for r in svc.grade(batch):
            if r.status is Status.INFRA_ERROR:
                failed.append(r)
            yield r

    return grade_with_retries(GraderSpec.retries, tapped, requests)


def floored(r: GradeResult) -> bool:
    """Judged and given the floor: an `infra_error` (the grader's failure, its reward the floor's but null in a
    release) judges nothing, so it neither floors a cheat nor counts against an honest kernel."""
    return r.reward == REWARD_FLOOR and r.status is not Status.INFRA_ERROR


def summarise(results: list[GradeResult], meta: dict[str, dict], wall_s: float, workers: int,
              retried: list[GradeResult] = ()) -> str:
    """The verdict table of the grades that count (`results`: one an attempt a round, its last try's); `retried`:
    the tries the grader failed and the client graded again, counted where the work went, not in the verdicts."""
    runs: dict[str, list[GradeResult]] = collections.defaultdict(list)
    for r in results:
        runs[r.attempt_id].append(r)
    by_group = collections.defaultdict(dict)
    for aid, rs in runs.items():
        by_group[meta[aid]["group"]][aid] = rs
    lines = []
    cheats = by_group.get("cheat", {})
    lines.append("== cheats (each must be floored in every repeat)")
    for aid, rs in sorted(cheats.items()):
        lines.append(f"  {aid}\t" + " ".join(f"{r.status.value}/{r.reason_code.value}" for r in rs)
                     + ("" if all(floored(r) for r in rs) else "\tNOT FLOORED: " + rs[0].reason[:120]))
    escapes = by_group.get("escape", {})
    lines.append("== call-boundary escapes (each must be floored)")
    for aid, rs in sorted(escapes.items()):
        lines.append(f"  {aid}\t" + " ".join(f"{r.status.value}/{r.reason_code.value}" for r in rs)
                     + ("" if all(floored(r) for r in rs) else "\tNOT FLOORED: " + rs[0].reason[:120]))
    honest = by_group.get("honest", {})
    lines.append("== honest kernels (none may be floored, none is stopped at the clip but those slow past it by "
                 "design)")
    for aid, rs in sorted(honest.items()):
        for bad in [r for r in rs if floored(r)][:1] + [r for r in rs if r.status is Status.INFRA_ERROR][:1]:
            mark = "FLOORED" if floored(bad) else "NO VERDICT (the grader failed every try)"
            lines.append(f"  {mark} {aid}\t{bad.status.value}/{bad.reason_code.value}: {bad.reason[:160]}")
        for r in rs:
            mark = "stopped at the clip, slow past it by design" if meta[aid].get("past_clip") else \
                "STOPPED AT THE CLIP"
            for s in _clip_stopped(r):
                lines.append(f"  {mark} {aid}\tsize {s.size_key}: {s.cand_ms:.3f} ms against the expert's "
                             f"{s.expert_ms:.4f} ms, {s.reps} pairs, {s.loop.get('stalled')} calls let through")
    for group, title in (("own_inputs", "tasks that make their own inputs"), ("cuda_own", "our own CUDA candidates")):
        if by_group.get(group):
            lines.append(f"== {title} (each must get the verdict it expects)")
        for aid, rs in sorted(by_group.get(group, {}).items()):
            got = f"{rs[0].status.value}/{rs[0].reason_code.value}"
            lines.append(f"  {aid}\t{got}" + ("" if got == meta[aid]["expect"] else
                                                f"\tEXPECTED {meta[aid]['expect']}: {rs[0].reason[:160]}"))
    lines += corpus_lines(by_group.get("cuda_l1", {}), meta)
    demo = by_group.get("demo", {})
    if demo:  # the demo corpus says what each attempt was written to be; the grade says what it was
        lines.append("== demo attempts: what each was written to be, and the status it got")
        kinds = collections.defaultdict(collections.Counter)
        for aid, rs in demo.items():
            kinds[meta[aid]["intended"].split(":")[0]][rs[0].status.value] += 1
        for kind, got in sorted(kinds.items()):
            lines.append(f"  {kind}\t" + ", ".join(f"{k} {n}" for k, n in got.most_common()))
    experts = by_group.get("expert", {})
    lines.append("== experts graded against themselves (reward should be 0)")
    for aid, rs in sorted(experts.items()):
        lines.append(f"  {aid}\t" + " ".join(f"{r.reward:+.4f}" if r.reward != REWARD_FLOOR
                                             else f"FLOOR({r.reason_code.value})" for r in rs))
    expert_rewards = [r.reward for rs in experts.values() for r in rs if r.reward != REWARD_FLOOR]

    # Repeat precision: the same kernel at the same size in two repeats (fresh seeds, fresh workers).
    deltas = collections.defaultdict(list)
    flips, pairs_graded = 0, 0
    for aid, rs in list(honest.items()) + list(experts.items()):
        ok = [r for r in rs if r.reward != REWARD_FLOOR]
        for a, b in zip(ok, ok[1:]):
            pairs_graded += 1
            flips += point_label(a.reward) != point_label(b.reward)
            for s1, s2 in zip(a.sizes, b.sizes):  # a card's sizes come in one order in every grade
                if not (s1.speedup and s2.speedup and s1.cand_ms and s2.cand_ms):
                    continue
                dur = min(s1.cand_ms, s2.cand_ms)
                bucket = next(name for lo, hi, name in BUCKETS_MS if lo <= dur < hi)
                deltas[bucket].append(abs(math.log2(s1.speedup) - math.log2(s2.speedup)))
    all_results = [r for rs in runs.values() for r in rs]
    n_cheat_floored = sum(all(floored(r) for r in rs) for rs in cheats.values())
    n_cheat_full = sum(len(rs) >= 3 for rs in cheats.values())
    n_honest_floored = sum(any(floored(r) for r in rs) for rs in honest.values())
    n_honest_clipped = sum(any(_clip_stopped(r) for r in rs) for aid, rs in honest.items()
                           if not meta[aid].get("past_clip"))
    n_past_clip = sum(bool(meta[aid].get("past_clip")) for aid in honest)
    lines.append("== repeat precision |delta log2 speedup| per size, by the candidate's kernel duration")
    lines.append("  bucket\tpairs\tmedian\tp95\tmax")
    for _, _, name in BUCKETS_MS:
        d = deltas.get(name, [])
        if d:
            lines.append(f"  {name}\t{len(d)}\t{statistics.median(d):.4f}\t{pct(d, 0.95):.4f}\t{max(d):.4f}")
    big = [x for lo, hi, name in BUCKETS_MS if lo >= 0.02 for x in deltas.get(name, [])]
    lines += fewer_pairs_lines(list(honest.values()) + list(experts.values()), results)
    lines.append("== verdict")
    lines.append(f"  GPU-only cheats floored in every repeat\t{n_cheat_floored}/{len(cheats)} "
                 f"({n_cheat_full} with 3 repeats)")
    if escapes:
        n_escape_floored = sum(all(floored(r) for r in rs) for rs in escapes.values())
        lines.append(f"  call-boundary escapes floored\t{n_escape_floored}/{len(escapes)}")
    lines.append(f"  honest kernels floored\t{n_honest_floored}/{len(honest)}")
    lines.append(f"  honest kernels stopped at the clip\t{n_honest_clipped}/{len(honest) - n_past_clip}"
                 + (f" (and {n_past_clip} slow past the clip by design)" if n_past_clip else ""))
    if expert_rewards:
        lines.append(f"  experts' self-reward\tmedian {statistics.median(expert_rewards):+.4f}, "
                     f"p95 |reward| {pct([abs(x) for x in expert_rewards], 0.95):.4f} over {len(expert_rewards)}")
    if big:
        lines.append(f"  repeat |delta log2| (kernels >= 20 us)\tmedian {statistics.median(big):.4f}, "
                     f"p95 {pct(big, 0.95):.4f} over {len(big)} size pairs")
    lines.append(f"  label flips between repeats (point labels, tie band 0.05)\t{flips}/{pairs_graded}")
    lines.append("  " + retried_line(all_results, retried))
    gpu_hours = wall_s / 3600.0
    judged = [r for r in all_results if r.status is not Status.INFRA_ERROR]
    lines.append(f"  attempts graded\t{len(judged)} with a verdict in {wall_s:.0f} s with {workers} workers: "
                 f"{len(judged) / gpu_hours:.0f} per GPU-hour")
    all_results = all_results + list(retried)  # where the slots' and the device's time went: every try
    phases = collections.defaultdict(list)
    for r in all_results:
        for k, v in r.phase_seconds.items():
            phases[k].append(v)
    lines.append("  phase medians (s)\t"
                 + ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in sorted(phases.items())))
    timed = [r for r in all_results if any(s.reps for s in r.sizes)]
    if timed:  # the grades that ran the whole protocol: what a kept expert or reference costs shows here
        lines.append(f"  phase medians of {len(timed)} fully timed grades (s)\t" + ", ".join(
            f"{k} {statistics.median(r.phase_seconds.get(k, 0.0) for r in timed):.2f}" for k in sorted(phases)))
        lines.extend(turn_lines(timed))
    lines.extend(build_lines(all_results))
    via = collections.Counter(str(r.sandbox.get("reference_answers", "none")) for r in all_results)
    lines.append("  reference answers came through\t" + ", ".join(f"{k}: {n}" for k, n in via.most_common()))
    lines.append("  verified on a kept answer (grader.answers)\t" + answer_line(all_results))
    hang = hang_watch_line(all_results)
    if hang:
        lines.append(hang)
    oom = oom_line(all_results)
    if oom:
        lines.append(oom)
    started = collections.defaultdict(list)  # the candidate's worker: a spare, or spawned for the grade
    for r in all_results:
        if r.sandbox.get("worker"):
            started[r.sandbox["worker"]].append(r.phase_seconds.get("startup", 0.0))
    lines.append("  candidate workers (startup phase, median s)\t" + ", ".join(
        f"{k} {len(v)} ({statistics.median(v):.2f})" for k, v in sorted(started.items())))
    for layer in ("launch_gate", "output_arena", "own_root", "pid_ns", "ipc_ns"):  # what this host gave the candidates
        seen = collections.Counter(str(r.sandbox.get(layer, "not recorded"))[:160] for r in all_results if r.sandbox)
        lines.append(f"  sandbox {layer}\t" + ", ".join(f"{k}: {n}" for k, n in seen.most_common()))
    sizes = [s for r in all_results for s in r.sizes if s.reps]
    if sizes:
        half = [(s.log2_speedup_ci[1] - s.log2_speedup_ci[0]) / 2 for s in sizes if s.log2_speedup_ci]
        late = [s.late_ms for s in sizes if s.late_ms]
        lines.append(f"  timed pairs per size\tmedian {statistics.median(s.reps for s in sizes):.0f}, max "
                     f"{max(s.reps for s in sizes)}; interval half-width (log2) median {statistics.median(half):.4f}, "
                     f"p95 {pct(half, 0.95):.4f}; sizes charged for late work {len(late)}/{len(sizes)}"
                     + (f" (median {statistics.median(late) * 1e3:.1f} us)" if late else ""))
        lines.extend(loop_lines(sizes))
        watched = [(s, (s.log2_speedup_ci[1] - s.log2_speedup_ci[0]) / 2) for s in sizes
                   if s.device_watch is not None and s.log2_speedup_ci]
        if watched:
            lines.extend(watch_lines(watched))
    return "\n".join(lines)


FEWER_PAIRS = ((10, 0.015), (8, 0.015), (8, 0.02), (6, 0.02), (5, 0.03))
"""(least pairs, interval half-width target) of the loops `fewer_pairs_lines` replays: none wants more than the
grader's GPU default (10, 0.015 since H100 run 93; 20, 0.01 before, and these rows then were (20, 0.01), (14, 0.01),
(10, 0.01), (10, 0.015), (8, 0.015), (6, 0.02)), so each is a cut of the pairs a run made."""


def cut_at(logs: list[float], min_reps: int, target: float) -> int:
    """How many of a size's timed pairs (`logs`, in the order made) a loop of at least `min_reps` pairs, stopping once
    the ~95% interval of their median is within `target` either side, would have made: the first such count, else
    all of them (the loop that made them stopped there by its budget, the clip or its most pairs)."""
    for n in range(min_reps, len(logs)):
        lo, hi = median_ci(logs[:n])
        if (hi - lo) / 2 <= target:
            return n
    return len(logs)


def fewer_pairs_lines(repeats: list[list[GradeResult]], results: list[GradeResult]) -> list[str]:
    """What fewer timed pairs would have given, replayed on the pairs each size made (`loop["log2_pairs"]`): per loop
    of `FEWER_PAIRS`, the share of the run's timed pairs it makes, and the repeat precision of the honest kernels and
    the experts (|delta| of the median log2 between two repeats of a size, kernels of at least 20 us) from its cut.
    The late charge and the clip are left out on every row, the first row (the default's own rule) included, so the
    rows compare with each other, not with the verdict's line."""
    def pairs(s) -> list[float]:
        got = (s.loop or {}).get("log2_pairs")
        return got if isinstance(got, list) and got else []

    made = [pairs(s) for r in results for s in r.sizes if pairs(s)]
    repeat_pairs = []
    for rs in repeats:
        ok = [r for r in rs if r.reward != REWARD_FLOOR]
        for a, b in zip(ok, ok[1:]):
            repeat_pairs += [(pairs(s1), pairs(s2)) for s1, s2 in zip(a.sizes, b.sizes)
                             if pairs(s1) and pairs(s2) and s1.cand_ms and s2.cand_ms
                             and min(s1.cand_ms, s2.cand_ms) >= 0.02]
    if not made or not repeat_pairs:
        return []
    lines = ["== fewer timed pairs, replayed on each size's own pairs (the late charge and the clip left out)",
             "  least pairs	half-width target	pairs made (share of the run's)	repeat |delta log2| median	p95"
             "	size pairs"]
    total = sum(len(x) for x in made)
    for min_reps, target in FEWER_PAIRS:
        kept = sum(cut_at(x, min_reps, target) for x in made)
        deltas = [abs(median(a[:cut_at(a, min_reps, target)]) - median(b[:cut_at(b, min_reps, target)]))
                  for a, b in repeat_pairs]
        lines.append(f"  {min_reps}	{target}	{kept} ({kept / total:.0%})	{statistics.median(deltas):.4f}"
                     f"	{pct(deltas, 0.95):.4f}	{len(deltas)}")
    return lines


def lock_lines(lock: dict) -> list[str]:
    """The device lock's time (`DeviceLock.stats()`): the seconds of each state and span, the windows counted, and the
    wait of device windows on draws by the work of the draws held meanwhile (`blocked_by`), largest first, with its
    share of that wait: what to shorten first for the loops to wait less."""
    lines = ["  the device lock's time (s)\t" + ", ".join(f"{k.removesuffix('_s')} {v:.1f}"
                                                      for k, v in lock.items() if k.endswith("_s"))
             + f"; {lock['windows']} device windows, {lock.get('draw_windows', 0)} draw windows, "
               f"{lock.get('check_windows', 0)} check windows; loops gave way {lock.get('gave_way', 0)} times"]
    draws = lock.get("draws_by") or {}
    if draws:
        lines.append("  draws by their work (count, holder-seconds)\t" + ", ".join(
            f"{k} {n} ({v:.1f} s)" for k, (n, v) in sorted(draws.items(), key=lambda kv: -kv[1][1])))
    blocked = lock.get("blocked_by") or {}
    total = sum(blocked.values())
    if total > 0:
        lines.append("  device windows waited on draws, by the draws' work (s, share)\t" + ", ".join(
            f"{k} {v:.1f} ({100 * v / total:.0f}%)" for k, v in sorted(blocked.items(), key=lambda kv: -kv[1])))
    return lines


def purpose_lines(title: str, purposes: dict) -> list[str]:
    """A table of the device lock's named purposes (`DeviceLock.note`): count, seconds and milliseconds each."""
    if not purposes:
        return []
    return [f"== {title}", "  purpose\tcount\tseconds\tms each"] + [
        f"  {k}\t{n}\t{s:.1f}\t{1e3 * s / max(n, 1):.2f}" for k, (n, s) in purposes.items()]


OUTSIDE_PARTS = ("startup", "compile", "teardown")
"""The phases of a grade before its first size and after its last, where no part (`session._part`) is counted (but
the attempt's first call, `session.COMPILING_CALL_PART`, which the compile phase holds too)."""


def part_lines(results: list[GradeResult], purposes: dict) -> list[str]:
    """Where the slots' time went: the grades' parts (`session._part`, the lock's "grade: " purposes, each its own
    time only) beside the phases outside them, largest first, with their share of the grades' summed wall time; what
    neither names is the rest (the request's checks before the worker starts, the result's assembly)."""
    from grader.session import COMPILING_CALL_PART

    total = sum(r.phase_seconds.get("total", 0.0) for r in results)
    rows = [(k.removeprefix("grade: "), n, s) for k, (n, s) in purposes.items() if k.startswith("grade: ")]
    first = purposes.get(f"grade: {COMPILING_CALL_PART}", (0, 0.0))[1]  # in the compile phase, and a part of its own
    rows += [(f"{p} (phase)" + (", less the attempt's first call" if p == "compile" else ""),
              sum(p in r.phase_seconds for r in results),
              sum(r.phase_seconds.get(p, 0.0) for r in results) - (first if p == "compile" else 0.0))
             for p in OUTSIDE_PARTS]
    if not rows or total <= 0:
        return []
    rows.append(("none of these", len(results), total - sum(s for _, _, s in rows)))
    return ([f"== a slot's time by part of the grade ({len(results)} grades, {total:.1f} slot-seconds in all)",
             "  part\tcount\tseconds\tshare\tms each"]
            + [f"  {name}\t{n}\t{s:.1f}\t{s / total:.1%}\t{1e3 * s / max(n, 1):.1f}"
               for name, n, s in sorted(rows, key=lambda row: -row[2])])


def build_lines(results: list[GradeResult]) -> list[str]:
    """Extensions built ahead of their grades (grader.buildahead), and what the grades' own loads compiled."""
    ext = [r.sandbox["ext_cache"] for r in results if isinstance(r.sandbox.get("ext_cache"), dict)]
    ahead = [e["ahead"] for e in ext if isinstance(e.get("ahead"), dict)]
    out = []
    if ahead:
        took = [a.get("s", 0.0) for a in ahead]
        out.append(f"  builds ahead	{len(ahead)}: " + ", ".join(
            f"{k} {n}" for k, n in collections.Counter(str(a.get("outcome"))[:60] for a in ahead).most_common())
            + f"; {sum(took):.0f} s in all (median {statistics.median(took):.1f}, max {max(took):.1f}); queued for a "
            f"builder median {statistics.median(a.get('queued_s', 0.0) for a in ahead):.1f} s")
    if ext:
        out.append("  the grades' own loads	" + ", ".join(
            f"{k} {sum(e.get(k, 0) for e in ext)}" for k in ("served", "replayed", "built", "filed"))
            + f" (of {len(ext)} loads offered the cache)")
    for r in results:  # built ahead, then compiled again in its slot: which arguments told the two builds apart
        e = r.sandbox.get("ext_cache")
        if not (isinstance(e, dict) and isinstance(e.get("ahead"), dict) and e["ahead"].get("compiled")
                and e.get("compiled")):
            continue
        ahead, own = e["ahead"]["compiled"], e["compiled"]
        if {a.get("*") for a in ahead} & {o.get("*") for o in own}:
            what = ("the same material; the grade was offered " + (", ".join(e.get("offered_materials") or [])
                                                                  or "nothing"))
        else:
            differ = {k for a in ahead for o in own for k in set(a) | set(o) if k != "*" and a.get(k) != o.get(k)}
            what = "arguments that differ: " + ", ".join(sorted(differ))
        out.append(f"  built ahead, compiled again in its slot\t{r.attempt_id}: {what}")
    return out


def corpus_lines(graded: dict[str, list[GradeResult]], meta: dict[str, dict]) -> list[str]:
    """Real attempts (the CUDA-L1 sample): status counts by level, our speedup beside the one its authors
    claim for the correct ones, and the reason of every attempt not graded correct (their authors kept
    only candidates they found correct, so each of those is a mismatch to explain)."""
    if not graded:
        return []
    first = {aid: rs[0] for aid, rs in graded.items()}
    statuses = sorted({r.status.value for r in first.values()})
    out = ["== CUDA-L1 attempts (authors: every one correct, claimed speedup on an H100)",
           "  level	" + "\t".join(statuses) + "\ttotal"]
    for level in sorted({meta[a]["level"] for a in first}):
        row = collections.Counter(r.status.value for a, r in first.items() if meta[a]["level"] == level)
        out.append(f"  L{level}\t" + "\t".join(str(row.get(s, 0)) for s in statuses) + f"\t{sum(row.values())}")
    correct = [a for a, r in first.items() if r.status.value == "correct"]
    out.append(f"  graded correct\t{len(correct)}/{len(first)} ({100 * len(correct) / len(first):.0f}%) of attempts "
               "their authors report correct")
    out.append("  attempt\tlanguage\tstatus/reason\tours (x, vs eager expert)\tclaimed (x, H100)\treason")
    for aid, r in sorted(first.items()):
        ours = f"{r.speedup_geomean:.3f}" if r.speedup_geomean else "-"
        claimed = meta[aid].get("claimed_speedup")
        out.append(f"  {aid}\t{meta[aid].get('language')}\t{r.status.value}/{r.reason_code.value}\t{ours}\t"
                   f"{claimed if claimed is not None else '-'}\t"
                   f"{'' if r.status.value == 'correct' else r.reason[:220]}")
    return out


def turn_lines(timed: list[GradeResult]) -> list[str]:
    """The fully timed grades by their task's turn in the run, in the order they ended: a task's first grade starts
    its reference and expert workers and compiles the expert at each size, a later one finds them kept in its slot
    (the queue gives a task's attempts to the slot that graded it). Median total and correctness phase (s)."""
    seen: set[str] = set()
    turns: dict[str, list[GradeResult]] = {"a task's first": [], "a task's later": []}
    for r in timed:
        turns["a task's later" if r.task_id in seen else "a task's first"].append(r)
        seen.add(r.task_id)
    return [f"  fully timed grades, {turn} (median s)\t{len(rs)}: total "
            f"{statistics.median(r.phase_seconds.get('total', 0.0) for r in rs):.2f}, correctness "
            f"{statistics.median(r.phase_seconds.get('correctness', 0.0) for r in rs):.2f}"
            for turn, rs in turns.items() if rs]


def loop_lines(sizes: list) -> list[str]:
    """Where the timing loops spent the device's exclusive time (SizeResult.loop): seconds held per size and
    in all, and per timed call the parent's round trip, the worker's span and the device interval (medians
    over the sizes' medians, ms), for candidate and twin; calls the parent let through the launch gate."""
    loops = [s.loop for s in sizes if s.loop]
    if not loops:
        return []
    held = [lp["held_s"] for lp in loops]
    waits = [lp.get("window_wait_s", 0.0) for lp in loops]
    out = [f"  timing loops\t{len(loops)} sizes, {sum(bool(lp.get('interleaved')) for lp in loops)} interleaved "
           f"window by window; {sum(held):.1f} s of loops in all (per size median {statistics.median(held):.3f} s, "
           f"p90 {pct(held, 0.9):.3f} s), of which waiting for other loops' windows {sum(waits):.1f} s (median "
           f"{statistics.median(waits):.3f} s); calls the parent let through the launch gate (stalled): "
           f"{sum(lp.get('stalled', 0) for lp in loops)}",
           f"  gave way to check work\t{sum(lp.get('gave_way', 0) for lp in loops)} times, "
           f"{sum(lp.get('gave_way_s', 0.0) for lp in loops):.1f} s waiting; sizes stopped below the clip: "
           f"{sum(bool(lp.get('clip_stop')) for lp in loops)}",
           "  timed pairs ended by (sizes)\t" + (", ".join(f"{why} {n}" for why, n in collections.Counter(
               lp["ended"] for lp in loops if lp.get("ended")).most_common()) or "-"),
           "  per timed call (ms, median of the sizes' medians)\tround trip\tworker span\tdevice"]
    for who in ("cand", "twin"):
        cells = []
        for what in ("round_trip", "span", "device"):
            vals = [lp[f"{who}_{what}_ms"] for lp in loops if lp.get(f"{who}_{what}_ms") is not None]
            cells.append(f"{statistics.median(vals):.3f}" if vals else "-")
        out.append(f"  {'candidate' if who == 'cand' else 'twin'}\t" + "\t".join(cells))
    for key, title, columns in (("parts_ms", "worker span by part", "park\tinputs\ttimed call\tcheck\trest"),
                                ("window_parts_ms", "device window by part",
                                 "to the gate seen open\tto the end seen\tsynchronises\tto the parent's done")):
        out.append(f"  {title} (ms, median of the sizes' medians)\t{columns}")
        for who in ("cand", "twin"):
            rows = [lp[f"{who}_{key}"] for lp in loops if lp.get(f"{who}_{key}")]
            if rows:
                out.append(f"  {'candidate' if who == 'cand' else 'twin'}\t"
                           + "\t".join(f"{statistics.median(r[i] for r in rows):.3f}" for i in range(len(rows[0]))))
    return out


def watch_lines(watched: list) -> list[str]:
    """What the device watch saw in the timing loops, noisy sizes (interval half-width over 0.1 in log2)
    against the rest: how often another process used the device, whose, and the SM clocks."""
    out = ["== device watch during timing loops (grader.devicewatch)", "  sizes\tn\twith another process\t"
           "roles seen (loops)\tSM MHz at the ends, median (min)\tclock-event reasons (loops)"]
    for name, group in (("noisy (>0.1)", [s for s, h in watched if h > 0.1]),
                        ("clean", [s for s, h in watched if h <= 0.1])):
        if not group:
            continue
        roles = collections.Counter(role for s in group for role in  # each loop counted once per kind of role
                                    {" ".join(o["role"].split()[2:]) or o["role"]
                                     for o in s.device_watch.get("others", [])})
        mhz = [m for s in group for m in s.device_watch.get("sm_mhz", []) if isinstance(m, int)]
        reasons = collections.Counter(r for s in group for r in s.device_watch.get("reasons", []))
        lines_mhz = f"{statistics.median(mhz):.0f} ({min(mhz)})" if mhz else "-"
        out.append(f"  {name}\t{len(group)}\t{sum(bool(s.device_watch.get('others')) for s in group)}\t"
                   f"{dict(roles.most_common(6)) or '-'}\t{lines_mhz}\t{dict(reasons.most_common(4)) or '-'}")
    return out


SLOT_GIB = 11.6
"""Device memory one slot of the acceptance's mix takes at most: H200 run 66 reached 139.6 GiB with 12 slots, and
H100 runs 67 and 68 (79.6 GiB, 12 slots) ran out of it, 107 and 104 of their 194 and 186 grades ending infra_error
(the kept reference and expert workers alone held 30.7 and 19.7 GiB at the fullest)."""
AUTO_MOST = 12


def auto_workers(device_gib: float | None) -> int:
    """`--workers auto`: as many slots as the device's memory holds at `SLOT_GIB` each, at most `AUTO_MOST` (12 on an
    H200's 140 GiB, 6 on an H100's 80); the production setting, 6, without a GPU."""
    if not device_gib:
        return 6
    return max(1, min(AUTO_MOST, int(device_gib // SLOT_GIB)))


def device_gib(device: str) -> float | None:
    """The GPU's memory in GiB through NVML (no CUDA context in this process), None without one."""
    if device == "cpu":
        return None
    from grader.fingerprint import read_local

    mib = read_local(True).get("memory_total_mib")
    return mib / 1024 if mib else None


def environment(svc, host: dict | None = None) -> dict:
    """The run's date, device, versions and `host` (`host_profile` read before the service started; read now without
    one), with the fixed loop read again now, the service up (`python_loop_ms_service_up`): the loop runs in this
    process, whose slot threads, spares and builders are then starting beside it. Until H100 run 153 only that second
    reading was recorded, and on one machine it went 61-78 ms and 122-145 ms by turns from run to run (H200 run 147,
    H100 runs 150 and 152); H100 run 153 read 61-65 ms before four runs' services and 64-103 ms beside them."""
    import torch
    import triton

    up = host_profile(repeats=3)
    host = dict(host or up, python_loop_ms_service_up=up["python_loop_ms"])
    return {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "device": svc.device_name,
            "python": platform.python_version(),
            "torch": torch.__version__, "triton": triton.__version__, "fingerprint_id": svc.fingerprint_id,
            "fingerprint": svc.fingerprint, "host": host}


def head_line(env: dict) -> str:
    """The first line of the summary and of the run's log: the date, the device (its UUID and driver where the
    fingerprint has them: a sweep keeps only the summaries, and H200 run 147's named no card) and the versions."""
    fp = env.get("fingerprint") or {}
    card = ", ".join(([fp["gpu_uuid"]] if fp.get("gpu_uuid") else [])
                     + ([f"driver {fp['driver']}"] if fp.get("driver") else []))
    return (f"# {env['date']} {env['device']}" + (f" ({card})" if card else "")
            + f" torch {env['torch']} triton {env['triton']} python {env['python']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for grades.jsonl, summary.txt, environment.json")
    ap.add_argument("--workers", default="6", help="slots grading at once (the production setting is 6), or `auto`: "
                    f"one per {SLOT_GIB} GiB of the device's memory, at most {AUTO_MOST} (`auto_workers`)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="no new round starts after this many seconds")
    ap.add_argument("--hard-stop-s", type=float, default=440.0,
                    help="past this, the table is written from the grades so far and the run ends")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--groups", default=None,
                    help="comma-separated subset of cheat,escape,honest,own_inputs,cuda_own,cuda_l1,demo,expert")
    ap.add_argument("--cuda-l1", type=int, default=0, help="also grade this many attempts of the prepared CUDA-L1 "
                    "sample (python bench/cuda_l1_sample.py --n N, where ../shared/data is; carry .gpu_carry)")
    ap.add_argument("--demo", type=int, default=0, help="also grade this many attempts of the demo corpus")
    ap.add_argument("--limit", type=int, default=None, help="at most this many attempts per group (smoke runs)")
    ap.add_argument("--with", dest="with_", default="", help="comma-separated parts, off by default until a GPU "
                    f"run has measured them, to switch on: {', '.join(OPT_IN + SERVICE_OPT_IN)}")
    ap.add_argument("--min-reps", type=int, default=None,
                    help="timed pairs a size makes at least before its interval may end it (`Effort.min_reps`; the "
                         "device's default otherwise): the repeat-precision figures say what fewer pairs cost")
    ap.add_argument("--target-halfwidth", type=float, default=None,
                    help="the ~95%% interval of a size's log2 speedup, either side of its median, at which its timing "
                         "may stop after --min-reps pairs (`Effort.target_log2_halfwidth`; the device's default "
                         "otherwise). Run 66 ended most sizes at 20 pairs, half-width median 0.013, on its 3 s wall "
                         "cap; its repeat median was 0.0054 against the goal of 0.01")
    ap.add_argument("--warmup-pairs", type=int, default=None,
                    help="untimed pairs that open each size's timing (`Effort.warmup_pairs`, 2 on a GPU otherwise): "
                         "H200 run 123's warm-up calls held the lock's draws 36.8 of their 188 holder-seconds, and "
                         "the repeat-precision figures say what fewer cost")
    ap.add_argument("--size-budget-s", type=float, default=None,
                    help="a size's timing budget (`Effort.size_budget_s`, the device's default otherwise): its loop's "
                         "windows may hold the device this long, and its wall clock is capped at three times it. "
                         "Runs 69 and 70 stopped 139 of 338 and 246 of 405 sizes on it, wider than the target")
    ap.add_argument("--effort", default="",
                    help="comma-separated field=value for the numeric fields of `grader.session.Effort` not named by "
                         "an option above (`clip_reps=3,verify_timed=2`), each set for this run only: "
                         "bench/slot_sweep.py's `@field=value`")
    ap.add_argument("--answer-budget-gib", type=float, default=None,
                    help="page-locked host memory the kept reference answers may hold (grader.answers; the device's "
                         "default otherwise): bench/answer_reuse.py replays run 66 at 349 kept with 12 GiB, 956 with "
                         "48; the summary's host memory line says what the host has to spare")
    ap.add_argument("--without", default="", help="comma-separated parts to switch off, to compare a run with and "
                    f"without them: {', '.join(SWITCHES)}")
    ap.add_argument("--fresh-sample", type=int, default=0, help="first grade this many of round 1's attempts (every "
                    "k-th, so each group is in it) one at a time in a fresh interpreter each, the KernelBench way: "
                    "the baseline the throughput is compared with, on the same attempts in the same run")
    ap.add_argument("--fresh-budget-s", type=float, default=150.0, help="the baseline starts no attempt after this")
    ap.add_argument("--sample-stacks", type=float, default=0.0, metavar="MS",
                    help="every MS milliseconds, read where each slot thread is (bench/stacksample.py): the summary "
                    "then gives the shares of round 1's and every round's samples by the grader's code they were in")
    ap.add_argument("--stall-s", type=float, default=0.0, help="when no grade has come for this long, write every "
                    "thread's stack and the device lock's state to DIR/stall.txt, write the table and end (exit 3)")
    args = ap.parse_args(argv)
    if args.workers == "auto":
        args.workers = auto_workers(device_gib(args.device))
    elif args.workers.isdigit() and int(args.workers) > 0:
        args.workers = int(args.workers)
    else:
        ap.error(f"--workers: a number of slots or `auto`, not {args.workers!r}")
    from grader.service import GraderService

    args.out.mkdir(parents=True, exist_ok=True)
    items, extra_cards = plan(set(args.groups.split(",")) if args.groups else None, args.cuda_l1, args.demo)
    if args.limit:
        items = {k: v[:args.limit] for k, v in items.items()}
    meta = {req.attempt_id: m for rows in items.values() for req, m in rows}
    host_before = host_profile()  # the host's speed before this run starts anything (`environment`)
    t_run = time.perf_counter()  # budgets and the hard stop count from here: the device call's own clock
    results: list[GradeResult] = []
    clock = {"service_t0": t_run, "round1_s": None, "round1_n": 0, "round1_tasks": set(), "baseline": None,
             "rounds": []}
    host: list = []  # the service's host sampler (and the slot threads' stack sampler), once the service is up
    live = open(args.out / "grades.jsonl", "w")  # the grades that count: one an attempt a round
    failed: list[GradeResult] = []  # every try the grader failed (infra_error); those not in `results` were retried
    log = open(args.out / "progress.log", "w")

    def say(text: str) -> None:
        print(text, flush=True)
        log.write(text + "\n")
        log.flush()

    def finish(env: dict, svc) -> None:
        lock = svc.gpu_lock.stats()
        kept = {id(r) for r in results}
        retried = [r for r in failed if id(r) not in kept]  # graded again, as the pipeline's client does
        with open(args.out / "grades_retried.jsonl", "w") as f:
            f.writelines(r.to_json() + "\n" for r in retried)
        summary = summarise(results, meta, time.perf_counter() - clock["service_t0"], args.workers, retried)
        judged = sum(r.status is not Status.INFRA_ERROR for r in results)
        summary += "\n" + "\n".join(throughput_lines(clock, time.perf_counter() - clock["service_t0"], judged,
                                                     args.workers, results))
        summary += "".join(f"\n{line}" for line in lock_lines(lock))
        purposes = lock.get("purposes", {})
        summary += "".join(f"\n{line}" for line in round_start_lines(clock["rounds"], purposes))
        if clock["rounds"]:
            round1 = results[:clock["rounds"][0]["grades"]]
            summary += "".join(f"\n{line}" for line in outcome_lines(round1, args.workers, clock["round1_s"]))
            summary += "".join(f"\n{line}" for line in [bound_line(round1, args.workers)] if line)
        apart = ("grade: ", "worker start, ", "worker end, ")  # each a table of its own
        tables = (  # holder-seconds: check work's holds overlap, so they add up past the wall clock
            purpose_lines("check work's holds by use, and their parts (`purpose: part`, timed on the parent's or the "
                          "worker's clock inside the hold)",
                          {k: v for k, v in purposes.items() if not k.startswith(apart)}),
            purpose_lines("worker starts and ends by kind and part (`launcher.Slot`: the worker's boot, its sandbox's "
                          "share, on its clock; the spawn to its hello and gate on this side's; a kept worker's arena "
                          "and loads; an end's kill and reap)",
                          {k: v for k, v in sorted(purposes.items()) if k.startswith(apart[1:])}),
            part_lines(results + retried, purposes))
        summary += "".join(f"\n{line}" for table in tables for line in table)
        if svc.expert_builds is not None:
            built = json.dumps(svc.expert_builds.summary())
            summary += f"\n  the experts' kernels built ahead (grader.expertseed)\t{built}"
        summary += "\n" + "\n".join(memory_lines(svc))
        summary += "\n" + "\n".join(host_lines(host, clock))
        (args.out / "summary.txt").write_text(f"{head_line(env)}\n# {profile_line(env['host'])}\n{summary}\n")
        say(summary)

    without = {w for w in args.without.split(",") if w}
    unknown = without - set(SWITCHES)
    if unknown:
        ap.error(f"--without: unknown parts {sorted(unknown)}")
    switches = {part: part not in without for part in SWITCHES}
    if args.fresh_sample:
        clock["baseline"] = fresh_baseline(spread_first(every_kth(round_requests(items, ROUNDS[0]), args.fresh_sample)),
                                           extra_cards, args.device, args.fresh_budget_s, args.out, say)
    clock["service_t0"] = t0 = time.perf_counter()
    # The service and the baseline each build extensions into an empty cache of their own: neither is served
    # what the other compiled (within a round every attempt is another program anyway).
    opted = {w for w in args.with_.split(",") if w}
    if opted - set(OPT_IN) - set(SERVICE_OPT_IN):
        ap.error(f"--with: unknown parts {sorted(opted - set(OPT_IN) - set(SERVICE_OPT_IN))}")
    served = dict.fromkeys(opted & set(SERVICE_OPT_IN), True)
    opted -= set(served)
    effort = None
    tuned = {k: v for k, v in (("min_reps", args.min_reps), ("target_log2_halfwidth", args.target_halfwidth),
                               ("size_budget_s", args.size_budget_s), ("warmup_pairs", args.warmup_pairs))
             if v is not None}
    try:
        fields = effort_fields(args.effort)
    except ValueError as e:
        ap.error(f"--effort: {e}")
    tuned.update(fields)
    if tuned or opted:
        import dataclasses

        import torch

        from grader.session import Effort

        cuda = args.device.startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
        effort = dataclasses.replace(Effort.for_device(cuda), **dict.fromkeys(opted, True), **tuned)
    with GraderService(workers=args.workers, device=args.device, catalogue_extra=extra_cards,
                       compile_cache=tempfile.mkdtemp(prefix="kerneltraj-acc-ext-"), effort=effort,
                       answer_budget_bytes=(None if args.answer_budget_gib is None
                                            else int(args.answer_budget_gib * 2**30)),
                       **dict(switches, build_ahead=None if switches["build_ahead"] else 0), **served) as svc:
        env = dict(environment(svc, host_before), switches=switches, min_reps=svc.effort.min_reps,
                   target_log2_halfwidth=svc.effort.target_log2_halfwidth, size_budget_s=svc.effort.size_budget_s,
                   warmup_pairs=svc.effort.warmup_pairs, effort_set={k: getattr(svc.effort, k) for k in fields},
                   answer_budget_bytes=svc.answers.budget_bytes if svc.answers is not None else 0,
                   kept_tasks=svc.kept_tasks, triton_seed=svc.triton_seed,
                   triton_key_ms=[slot.triton_key_ms for slot in svc.slots],
                   switched_on={**{part: getattr(svc.effort, part) for part in OPT_IN},
                                **{part: part in served for part in SERVICE_OPT_IN}})
        (args.out / "environment.json").write_text(json.dumps(env, indent=1, sort_keys=True, default=str))
        say(f"{head_line(env)}; "
            f"service up in {time.perf_counter() - t0:.0f} s; switched off: {', '.join(sorted(without)) or 'nothing'}; "
            f"min_reps {svc.effort.min_reps}, target half-width {svc.effort.target_log2_halfwidth}, size budget "
            f"{svc.effort.size_budget_s} s, warm-up pairs {svc.effort.warmup_pairs}"
            + "".join(f", {k} {getattr(svc.effort, k)}" for k in fields) + "; switched on: "
            f"{', '.join([p for p in OPT_IN if getattr(svc.effort, p)] + sorted(served)) or 'nothing'}\n"
            f"# {profile_line(env['host'])}"
            + (f"\n# Triton's module built for the workers (grader.tritonseed): {json.dumps(svc.triton_seed)}"
               if svc.triton_seed else ""))
        clock["graded_t0"] = clock["last_grade"] = time.perf_counter()
        watch = svc.watch
        host.append(HostWatch(svc.roles, device_used=watch.used if watch is not None else None,
                              device_roles=(lambda: watch.memory_by_role(svc.roles())) if watch is not None else None
                              ).start())
        if args.sample_stacks:
            host.append(StackSampler(args.sample_stacks / 1e3).start())
        if args.stall_s:
            threading.Thread(target=watchdog, args=(svc, clock, args, env, finish, say), daemon=True).start()
        for n, groups in enumerate(ROUNDS, 1):
            if time.perf_counter() - t_run > args.budget_s:
                say(f"# round {n} not started: {args.budget_s:.0f} s budget spent")
                break
            clock["rounds"].append({"round": n, "grades": 0, "tasks": set(),
                                    "purposes": svc.gpu_lock.stats().get("purposes", {})})
            try:
                for o in grade_round(svc, round_requests(items, groups), failed):
                    r = o.result
                    results.append(r)
                    if o.tries > 1:
                        say(f"r{n} {r.attempt_id}: the grader failed its first try ({o.retry_s:.1f} s), graded again")
                    clock["rounds"][-1]["grades"] += 1
                    clock["rounds"][-1]["tasks"].add(r.task_id)
                    clock["last_grade"] = time.perf_counter()
                    live.write(r.to_json() + "\n")
                    live.flush()
                    say(f"r{n} {time.perf_counter() - t0:6.1f}s {r.attempt_id}\t{r.status.value}\t{r.reason_code.value}"
                        f"\t{r.reward:+.3f}\t{r.phase_seconds.get('total', 0):.1f}s\t{r.reason[:90]}")
                    if n == 1 and r.status is not Status.INFRA_ERROR:  # a verdict: what the rate counts
                        clock["round1_n"] += 1
                        clock["round1_tasks"].add(r.task_id)
                    if time.perf_counter() - t_run > args.hard_stop_s:  # the table of what is done, then out at once
                        say(f"# hard stop at {args.hard_stop_s:.0f} s in round {n}")
                        finish(env, svc)
                        live.close()
                        os._exit(0)
            except GradingIncomplete as e:  # the service lost some: said, and the run goes on without them
                say(f"# round {n}: {e}")
            if n == 1:
                clock["round1_s"] = time.perf_counter() - clock["graded_t0"]
        finish(env, svc)
    live.close()
    log.close()
    return 0


def watchdog(svc, clock: dict, args, env: dict, finish, say) -> None:
    """A run whose grades stop coming is recorded, not waited out: every thread's stack (where the slots wait) and
    the device lock's state go to DIR/stall.txt, the table is written, and the run ends with exit status 3."""
    import faulthandler

    while True:
        time.sleep(5)
        quiet = time.perf_counter() - clock["last_grade"]
        if quiet < args.stall_s:
            continue
        with open(args.out / "stall.txt", "w") as f:
            f.write(f"no grade for {quiet:.0f} s; device lock {json.dumps(svc.gpu_lock.state())}\n")
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
            f.write("\n== processes (pid ppid uid state threads wchan; kernel stack where readable)\n"
                    + process_table() + "\n== nvidia-smi\n" + _command(["nvidia-smi"]))
        say(f"# stalled: no grade for {quiet:.0f} s; stacks in stall.txt")
        finish(env, svc)
        os._exit(3)


def process_table() -> str:
    """Every user process: where each one waits (a stalled run's record)."""
    rows = []
    for pid in sorted((int(p) for p in os.listdir("/proc") if p.isdigit())):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:140]
            if not cmd:
                continue
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
            wchan = open(f"/proc/{pid}/wchan").read()
            try:
                stack = " < ".join(ln.split("]", 1)[-1].strip().split("+")[0] for ln in
                                   open(f"/proc/{pid}/stack").read().splitlines()[:8])
            except OSError:
                stack = "-"
            tasks = os.listdir(f"/proc/{pid}/task")
            waits = collections.Counter(open(f"/proc/{pid}/task/{t}/wchan").read() or "-" for t in tasks)
            rows.append(f"{pid} {status.get('PPid', '?').strip()} {status.get('Uid', '?').split()[0]} "
                        f"{status.get('State', '?').strip()} {len(tasks)} {wchan or '-'} {dict(waits)} | {stack} "
                        f"| {cmd}")
        except (OSError, ValueError):
            continue
    return "\n".join(rows)


def _command(argv: list[str]) -> str:
    import subprocess

    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return f"{argv[0]}: {e}"


def round_requests(items: dict, groups) -> list[GradeRequest]:
    """The requests of one round, in the order they are graded: by group, within a group by task (neighbours
    share a task, so slots reuse expert twins); each repeat draws its own seed."""
    reqs = []
    for g, rep in groups:
        reqs += sorted((GradeRequest(**{**req.__dict__, "seed": 1000 * rep + 17}) for req, _ in items.get(g, [])),
                       key=lambda r: r.task_id)
    return reqs


def every_kth(reqs: list, k: int) -> list:
    """k requests spread evenly over the list (every group of a round is in it, in proportion)."""
    if k >= len(reqs):
        return list(reqs)
    step = len(reqs) / k
    return [reqs[int(i * step)] for i in range(k)]


def spread_first(reqs: list) -> list:
    """The same requests, in an order whose every prefix is spread over the list (0, 4, 2, 6, 1, 5, 3, 7 for 8: the
    bit-reversed indices): a fresh baseline its budget cuts short has then graded a spread of the round, not its first
    task's attempts (H200 run 81 graded 3 of 8 in its 45 s, the round's first three)."""
    bits = max(1, (len(reqs) - 1).bit_length())
    order = sorted(range(len(reqs)), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))
    return [reqs[i] for i in order]


FRESH_WARM_TIMEOUT_S = 120.0
"""How long the baseline's untimed first interpreter may take to say hello."""


def fresh_baseline(reqs: list[GradeRequest], extra_cards: list, device: str, budget_s: float, out: Path,
                   say) -> dict:
    """The same protocol, one attempt at a time, each candidate in a fresh interpreter (import torch, init CUDA,
    compile, check, time, exit): KernelBench's way of running a batch. Grades go to grades_fresh.jsonl.

    One fresh interpreter is started and ended first, untimed (`warm_s`), as the service's start-up is left out of
    its rate: the first fresh start on a machine is cold. The startup phase of the baseline's first attempt took 8.8 s
    in H200 run 95 and of its second 3.3 s; the first took 7.5 s in H100 run 94 and 14.6 s in H100 run 97, where with
    a 40 s budget that one attempt was the whole baseline."""
    from grader import wire
    from grader.service import GraderService

    t_boot = time.perf_counter()
    done, statuses = 0, collections.Counter()
    with open(out / "grades_fresh.jsonl", "w") as f, \
            GraderService(mode="fresh", workers=1, device=device, catalogue_extra=extra_cards,
                          compile_cache=tempfile.mkdtemp(prefix="kerneltraj-fresh-ext-"), build_ahead=0) as svc:
        t_warm = time.perf_counter()
        boot = t_warm - t_boot
        slot = svc.slots[0]
        try:
            slot.finish(slot.spawn(FRESH_WARM_TIMEOUT_S))
        except (OSError, wire.WireError) as e:  # the baseline goes on, cold, rather than end the run
            say(f"fresh warm-up failed, the baseline starts cold: {e}")
        t0 = time.perf_counter()
        warm = t0 - t_warm
        for req in reqs:
            if time.perf_counter() - t0 > budget_s:
                break
            r = svc.grade_one(req)
            f.write(r.to_json() + "\n")
            f.flush()
            done += 1
            statuses[r.status.value] += 1
            say(f"fresh {time.perf_counter() - t0:6.1f}s {r.attempt_id}\t{r.status.value}\t{r.reward:+.3f}\t"
                f"{r.phase_seconds.get('total', 0):.1f}s")
        wall = time.perf_counter() - t0
        started = svc.gpu_lock.stats()["purposes"].get("worker start, candidate: to its hello and gate", [0])[0]
    return {"n": done, "of": len(reqs), "wall_s": wall, "boot_s": boot, "warm_s": warm, "statuses": dict(statuses),
            "candidates_started": started, "ids": [r.attempt_id for r in reqs[:done]]}


def host_lines(host: list, clock: dict) -> list[str]:
    """The host's CPUs, the parent's cores and its threads' wake-up delay (bench/hostwatch.py), over round 1 and
    over the whole run; with `--sample-stacks`, where the slot threads were (bench/stacksample.py)."""
    if not host:
        return []
    watch, t0, now = host[0], clock["graded_t0"], time.perf_counter()
    t1 = t0 + clock["round1_s"] if clock["round1_s"] else now
    out = (["== the host while grading (bench/hostwatch.py)"] + watch.lines(t0, t1, "round 1")
           + watch.lines(t0, now, "every round") + watch.role_lines())
    for stacks in host[1:]:
        out += (["== where the slot threads were (bench/stacksample.py: innermost frames, `file:function:line`)"]
                + stacks.lines(t0, t1, "round 1") + stacks.lines(t0, now, "every round"))
    return out


STARTED = ("expert", "reference", "task")
"""The kept workers whose starts `round_start_lines` counts by round (a task's one worker, `Slot.task`, with
`--with task_workers`)."""


def round_start_lines(rounds: list[dict], purposes: dict) -> list[str]:
    """The expert, reference and task workers started in each round (`worker start, <role>: to its hello and gate`
    in the lock's stats, counted from the round's start to the next's, the last to `purposes`, the stats now), beside
    the round's grades and tasks: how many tasks found their workers kept (`GraderService(keep_tasks=...)`)."""
    if not rounds:
        return []

    def started(stats: dict, role: str) -> int:
        return stats.get(f"worker start, {role}: to its hello and gate", [0])[0]

    out = ["== expert, reference and task workers started, by round", "  round\tgrades\ttasks\t" + "\t".join(STARTED)]
    for i, rnd in enumerate(rounds):
        after = rounds[i + 1]["purposes"] if i + 1 < len(rounds) else purposes
        out.append(f"  {rnd['round']}\t{rnd['grades']}\t{len(rnd['tasks'])}\t"
                   + "\t".join(str(started(after, role) - started(rnd["purposes"], role)) for role in STARTED))
    return out


def outcome_kind(r: GradeResult) -> str:
    """What a grade came to, for where round 1's slot time went (`outcome_lines`): its status, and a correct grade at
    the clip apart (each size slower than the expert by `SPEEDUP_CLIP`'s floor or more: its loops end there, but its
    calls are the slowest the round makes)."""
    from grader.contract import SPEEDUP_CLIP

    if r.status is Status.CORRECT:
        clipped = r.speedup_geomean is not None and r.speedup_geomean <= SPEEDUP_CLIP[0] * 1.0001
        return "correct, at the clip" if clipped else "correct"
    return r.status.value


OUTCOME_PHASES = ("compile", "correctness", "timing", "reference", "expert", "transfer")
"""The phases `outcome_lines` gives the medians of (a grade's phases overlap: reference, expert and transfer time
is also counted in the correctness or timing it happened in)."""


def outcome_lines(round1: list[GradeResult], workers: int, round1_s: float | None) -> list[str]:
    """Where round 1's slot time went, by what each grade came to (`outcome_kind`): grades, the slot-seconds their
    grades took (each grade's `total`), that share of the round's, the median grade and its phases' medians. The
    slot-seconds the slots had (slots x the round's wall) stand beside them: what the grades did not take, the slots
    spent idle or between grades."""
    total = sum(r.phase_seconds.get("total", 0.0) for r in round1)
    if total <= 0:
        return []
    by: dict[str, list[GradeResult]] = {}
    for r in round1:
        by.setdefault(outcome_kind(r), []).append(r)
    had = f" of the {workers} slots' {workers * round1_s:.0f}" if round1_s else ""
    out = [f"== round 1's slot time by what the grades came to ({len(round1)} grades, {total:.0f} slot-seconds{had})",
           "  outcome\tgrades\tslot-s\tshare\tmedian s\tmedian " + " / ".join(OUTCOME_PHASES) + " s"]
    spent = {kind: sum(r.phase_seconds.get("total", 0.0) for r in rs) for kind, rs in by.items()}
    for kind, rs in sorted(by.items(), key=lambda kv: -spent[kv[0]]):
        med = [statistics.median(r.phase_seconds.get(p, 0.0) for r in rs) for p in ("total",) + OUTCOME_PHASES]
        out.append(f"  {kind}\t{len(rs)}\t{spent[kind]:.1f}\t{spent[kind] / total:.0%}\t{med[0]:.1f}\t"
                   + " / ".join(f"{m:.1f}" for m in med[1:]))
    return out


def effort_fields(text: str) -> dict[str, int | float]:
    """`clip_reps=3,verify_timed=2` -> {"clip_reps": 3, "verify_timed": 2}: values for `Effort`'s numeric fields, each
    of its field's type; a `ValueError` naming what is not one (a part, a switch, is `--with` or `--without`)."""
    import dataclasses

    from grader.session import Effort

    numeric = {f.name: f.type for f in dataclasses.fields(Effort) if f.type in ("int", "float", int, float)}
    out: dict[str, int | float] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        name, _, value = item.partition("=")
        if name not in numeric:
            raise ValueError(f"{name!r} is no numeric field of Effort; these are: {', '.join(sorted(numeric))}")
        whole = numeric[name] in ("int", int)
        try:
            out[name] = int(value) if whole else float(value)
        except ValueError:
            raise ValueError(f"{item!r}: {value!r} is not {'an int' if whole else 'a float'}") from None
        if out[name] < 0:
            raise ValueError(f"{item!r}: a field's value is never negative")
    return out


GOAL_PER_GPU_HOUR = 3600
"""Issue #16's rate for round 1."""


def bound_line(round1: list[GradeResult], workers: int) -> str:
    """What round 1's own grades allow, whatever order the slots take them in: the round lasts at least its longest
    grade (a hang waits out its request's whole budget in its slot) and at least its slot-seconds over the slots, so
    its rate is at most the attempts over the larger of the two; and what `GOAL_PER_GPU_HOUR` would need of the same
    attempts. '' without grades."""
    totals = [r.phase_seconds.get("total", 0.0) for r in round1]
    if not totals or workers < 1 or max(totals) <= 0:
        return ""
    n, longest, spent = len(totals), max(totals), sum(totals)
    worst = round1[totals.index(longest)]
    floor_s = max(longest, spent / workers)
    goal_s = 3600 * n / GOAL_PER_GPU_HOUR
    return (f"  round 1's bound	its longest grade {longest:.1f} s ({outcome_kind(worst)}), its {spent:.0f} "
            f"slot-seconds over {workers} slots {spent / workers:.1f} s: at most {3600 * n / floor_s:.0f} per GPU-hour "
            f"in any order; {GOAL_PER_GPU_HOUR} needs the {n} within {goal_s:.0f} s, no grade longer and "
            f"{workers * goal_s:.0f} slot-seconds at most")


def throughput_lines(clock: dict, service_s: float, n: int, workers: int,
                     results: list[GradeResult] | None = None) -> list[str]:
    """Attempts per GPU-hour: the service over round 1 (the demo and CUDA-L1 mix, each attempt once), over the
    whole run, and the fresh-interpreter baseline on its sample of round 1, with the ratio; and with `results` (the
    service's grades), the ratio on the sampled attempts themselves (`same_attempts_line`)."""
    out = ["== throughput (attempts per GPU-hour; the device's wall clock, the service's start-up left out)"]
    graded_s = service_s - (clock.get("graded_t0", clock["service_t0"]) - clock["service_t0"])
    rate = None
    if clock["round1_s"]:
        rate = 3600 * clock["round1_n"] / clock["round1_s"]
        out.append(f"  service, round 1 ({workers} slots)\t{clock['round1_n']} in {clock['round1_s']:.0f} s: "
                   f"{rate:.0f} per GPU-hour")
    elif clock["round1_n"]:
        rate = 3600 * clock["round1_n"] / graded_s
        out.append(f"  service, round 1 cut off ({workers} slots)\t{clock['round1_n']} in {graded_s:.0f} s: "
                   f"{rate:.0f} per GPU-hour")
    tasks = len(clock.get("round1_tasks", ()))
    if tasks:  # each task's first attempt starts its expert and reference workers
        out.append(f"  round 1's tasks\t{tasks}: {clock['round1_n'] / tasks:.2f} attempts a task")
    if graded_s > 0:
        out.append(f"  service, every round\t{n} in {graded_s:.0f} s: {3600 * n / graded_s:.0f} per GPU-hour")
    base = clock.get("baseline")
    if base and base["n"]:
        b_rate = 3600 * base["n"] / base["wall_s"]
        out.append(f"  fresh interpreter per attempt, 1 at a time\t{base['n']} of a sample of {base['of']} in "
                   f"{base['wall_s']:.0f} s: {b_rate:.0f} per GPU-hour ({base['wall_s'] / base['n']:.2f} s each; "
                   f"statuses {base['statuses']}"
                   + (f"; after one interpreter started and ended untimed, {base['warm_s']:.1f} s" if "warm_s" in base
                      else "") + ")")
        if rate:
            out.append(f"  ratio, service round 1 / fresh baseline\t{rate / b_rate:.1f}x")
        same = same_attempts_line(base, results or [], workers)
        if same:
            out.append(same)
    return out


def same_attempts_line(base: dict, results: list[GradeResult], workers: int) -> str:
    """The baseline's ratio on the same attempts, as #16 asks: the fresh interpreters' wall for the attempts the
    baseline graded, against the device's wall the service's first grades of those attempts took, their slot time
    over the slots (round 1 keeps its slots busy: H100 run 98's 60 grades summed 744 slot-seconds in 131 s of 6
    slots). The round-1 ratio compares the sample with the whole round, whose attempts are lighter or heavier; '' when
    a sampled attempt has no service grade."""
    first: dict[str, GradeResult] = {}
    for r in results:
        first.setdefault(r.attempt_id, r)
    ids = base.get("ids") or []
    if not ids or any(i not in first for i in ids) or workers < 1:
        return ""
    slot_s = sum(first[i].phase_seconds.get("total", 0.0) for i in ids)
    if slot_s <= 0:
        return ""
    wall = slot_s / workers
    return (f"  ratio on the same {len(ids)} attempts\tfresh {base['wall_s']:.1f} s against the service's "
            f"{slot_s:.1f} slot-seconds over {workers} slots ({wall:.2f} s): {base['wall_s'] / wall:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
