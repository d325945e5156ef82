"""How many reference answers a run's grades would take from the pool, replayed under two versions of the grader.

    python3 bench/answer_reuse.py docs/measurements/2026-12-05-h200-run66/acc [--before a8b00fe] [--slots 12]

An acceptance run's `grades.jsonl` says, for every size of every grade, how many verifications it made (the
pool's `kept` and `computed`), and how long each grade took. This replays those grades, round by round in the
acceptance's order (`bench/gpu_acceptance.ROUNDS`, each round sorted by task as `round_requests` does), through
`--slots` simulated slots: each slot takes its next request from the service's own queue (`grader.service._Queue`),
and at each size, spread evenly over the grade's recorded time, asks the pool (`grader.answers.AnswerPool`, the
byte budget of a GPU host) for the seeds it verifies, kept answers first, and puts each answer it computes, with the
answer's float64 bytes from the task's card. The same grades go through the queue and pool of `--before` (a git
revision, read with `git show`) and of the working tree, side by side.

What it models coarsely: an answer's cost (what the pool weighs it by, and what the seconds column adds up) is a
hold of `--reference-ms` plus `--reference-ms-per-gib` for its bytes, not what each one took; of a size's timed
calls verified, the share that took pool seeds is the share of its loop's calls that did (`call_seeds` over the
calls made), the rest computed; and which seeds a grade verifies, kept ones first, as `SeedPlan` gives them. It
leaves out a grade's own time moving with the change. Its first rows are what the run recorded, to check the
replay of `--before` against; on H200 run 66, whose grader `--before` is, it reproduces the kept answers of both
rounds within a few. So it ranks two policies on a run's mix; the GPU run measures them.

It also counts the answers copied into the pool, and their bytes: with `answers_for_waiting` (a version whose queue
says which tasks wait, `_Queue.waiting`, and whose pool says what it would keep, `AnswerPool.admit`) only those
copied while another attempt at the task waits. Replayed on H100 runs 140, 142, 145, 148 and 149 against be06dff (6
slots): round 1 copied 163-177 answers (22-23 GiB) against 518-534 (69-72 GiB), every round 1,340-1,385 (248-257
GiB) against 1,874-1,924 (355-364 GiB), and the verifications on kept answers did not fall (1,497-1,542 against
1,477-1,517). On H200 run 66 (12 slots, two rounds) the copies halve (692 against 1,374) and 10 of 354 kept answers'
uses go: its round 2, a call of its own, grades round 1's experts again, whose last attempts' answers were not copied.
"""
from __future__ import annotations

import argparse
import collections
import heapq
import inspect
import json
import math
import random
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.answers import PINNED_ANSWER_BUDGET_BYTES  # noqa: E402
from grader.catalogue import load_catalogue  # noqa: E402
from grader.contract import GradeRequest  # noqa: E402
from grader.taskcard import resolve_shape, size_key  # noqa: E402
from bench.recorded import jsonl_lines  # noqa: E402

GROUPS = (("demo.", "cuda-l1:"), ("expert:",), ("adv:cheats/",), ("adv:honest/",), ("cuda_own:",))
"""Attempt-id prefixes in the order a round grades its groups (bench/gpu_acceptance.ROUNDS)."""


def load_version(rev: str | None, module: str):
    """`grader.<module>` as the working tree has it (rev None), or as git revision `rev` had it."""
    if rev is None:
        return __import__(f"grader.{module}", fromlist=["_"])
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:grader/{module}.py"], capture_output=True,
                          text=True, check=True).stdout
    mod = sys.modules[f"before_{module}"] = types.ModuleType(f"before_{module}")
    exec(compile(text, f"{rev}:grader/{module}.py", "exec"), mod.__dict__)  # noqa: S102 - our own code at `rev`
    return mod


def rounds(records: list[dict]) -> list[list[dict]]:
    """The run's grades split into the acceptance's rounds: the throughput mix, then the verdicts, then the
    repeats of the cheats and honest kernels (an adversarial attempt graded a second time)."""
    out, seen, cur = [[]], set(), 0
    for r in records:
        aid = r["attempt_id"]
        first_round = aid.startswith(GROUPS[0])
        if cur == 0 and not first_round:
            cur = 1
            out.append([])
        if cur == 1 and aid.startswith("adv:") and aid in seen:
            cur = 2
            out.append([])
        seen.add(aid)
        out[cur].append(r)
    return out


def submission_order(records: list[dict]) -> list[dict]:
    """A round's grades in the order the acceptance submits them: by group and repeat (an attempt graded twice
    in one round, as the experts are, is in the second repeat the second time), then by task (stable)."""
    seen, keyed = collections.Counter(), []
    for r in records:
        aid = r["attempt_id"]
        group = next((i for i, p in enumerate(GROUPS) if aid.startswith(p)), len(GROUPS))
        keyed.append(((group, seen[aid], r["task_id"]), r))
        seen[aid] += 1
    return [r for _, r in sorted(keyed, key=lambda kr: kr[0])]


@dataclass(frozen=True)
class Verified:
    """One size of a recorded grade: its key, an answer's bytes (float64), its verifications (`n`), how many of them
    the pool's seeds took (`pooled`: the check calls' and, of the timed calls', about the share of the loop's calls
    that took pool seeds, `SeedPlan`; the rest took fresh seeds, always computed), and how many the run kept."""

    key: str
    nbytes: int
    n: int
    pooled: int
    kept: int


def answer_sizes(card, record: dict, checks: int = 2) -> list[Verified]:
    """Each size the grade verified at; a hidden size (its key not in the record) is the card's hidden sizes in
    order."""
    hidden = [s for s, h in card.sizes("gpu") if h]
    out, k = [], 0
    for s in record.get("sizes") or []:
        loop = s.get("loop") or {}
        got = loop.get("answers")
        if s["size_key"] == "hidden":
            size, k = hidden[min(k, len(hidden) - 1)], k + 1
        else:
            size = next((z for z, _ in card.sizes("gpu") if size_key(z) == s["size_key"]), None)
        if not got or size is None:
            continue
        n, in_pool = int(got.get("kept", 0)) + int(got.get("computed", 0)), len(got.get("call_seeds") or {})
        made = max(in_pool, int(loop.get("warmup_pairs", 0)) + int(loop.get("pairs", 0)) + 1, 1)
        timed = max(n - checks, 0)
        out.append(Verified(size_key(size), 8 * math.prod(resolve_shape(card.output_shape, size)), n,
                            min(n, checks) + round(timed * min(1.0, in_pool / made)), int(got.get("kept", 0))))
    return out


def replay(records: list[list[dict]], cards: dict, queue_cls, pool_cls, slots: int, cost: Callable[[int], float],
           budget_bytes: int = PINNED_ANSWER_BUDGET_BYTES, seed: int = 0, checks: int = 2, for_waiting: bool = True
           ) -> list[collections.Counter]:
    """Each round's verifications on kept answers and on computed ones (and the seconds those took, `cost(bytes)`
    each), through `queue_cls` and `pool_cls`, and the answers copied into the pool (`copied`, `copied_bytes`). At
    each size, the first `checks` verifications (the check calls') come at its start, the rest after its loop; an
    answer computed for a pool seed is kept `cost` later. `for_waiting` (`GraderService(answers_for_waiting)`, where
    the version has it): an answer is copied only while another attempt at its task waits in the round's queue and
    the pool would keep it (`AnswerPool.admit`); else every one computed for a pool seed is."""
    weighs = "cost_s" in inspect.signature(pool_cls.put).parameters  # a pool before greedy-dual-size does not
    rng = random.Random(seed)
    pool = pool_cls(budget_bytes=budget_bytes)
    out = []
    for recs in records:
        by_id = {}
        reqs = []
        for i, r in enumerate(submission_order(recs)):
            req = GradeRequest(attempt_id=f"{r['attempt_id']}#{i}", task_id=r["task_id"], source="",
                               language="pytorch")
            by_id[req.attempt_id] = r
            reqs.append(req)
        q = queue_cls(reqs)
        admits = for_waiting and hasattr(q, "waiting") and hasattr(pool, "admit")
        counts = collections.Counter()
        events: list = []  # (time, order, slot, kind, payload)
        order = 0

        def start(slot: int, now: float, last: str | None) -> None:
            nonlocal order
            req = q.take(last)
            if req is None:
                return
            r = by_id[req.attempt_id]
            ph = r.get("phase_seconds") or {}
            dur = float(ph.get("total") or 1.0)
            lead = min(dur, sum(float(ph.get(k) or 0.0) for k in ("startup", "compile")))
            sizes = answer_sizes(cards[r["task_id"]], r) if r["task_id"] in cards else []
            each = (dur - lead) / max(len(sizes), 1)
            for i, v in enumerate(sizes):
                order += 1
                heapq.heappush(events, (now + lead + each * i, order, slot, "size",
                                        (r["task_id"], v, now + lead + each * (i + 0.9))))
            order += 1
            heapq.heappush(events, (now + dur, order, slot, "done", r["task_id"]))

        for s in range(slots):
            start(s, 0.0, None)
        while events:
            now, _, slot, kind, payload = heapq.heappop(events)
            if kind == "done":
                start(slot, now, payload)
                continue
            if kind == "put":  # an answer computed, kept once its hold is over
                task, key, sd, nbytes = payload
                answer = types.SimpleNamespace(nbytes=nbytes)  # all the pool reads of an answer
                pool.put(task, key, sd, answer, **({"cost_s": cost(nbytes)} if weighs else {}))
                continue
            if kind == "size":  # the size's plan (`SeedPlan`: the check calls take the first seeds); the check
                task, v, after = payload  # calls' answers now, the timed calls' after the loop; the timed calls
                seeds = pool.order(task, v.key, rng)[:v.pooled]  # past the pool's take fresh seeds
                counts["computed"] += v.n - v.pooled
                counts["computed_s"] += (v.n - v.pooled) * cost(v.nbytes)
                order += 1
                heapq.heappush(events, (after, order, slot, "verify", (task, v, seeds[checks:])))
                seeds = seeds[:checks]
            else:
                task, v, seeds = payload
            for sd in seeds:
                if pool.get(task, v.key, sd) is not None:
                    counts["kept"] += 1
                else:
                    counts["computed"] += 1
                    counts["computed_s"] += cost(v.nbytes)
                    if admits and not pool.admit(task, v.key, sd, v.nbytes, cost(v.nbytes), wanted=q.waiting(task)):
                        continue  # not copied (`answers_for_waiting`)
                    counts["copied"] += 1
                    counts["copied_bytes"] += v.nbytes
                    order += 1
                    heapq.heappush(events, (now + cost(v.nbytes), order, slot, "put", (task, v.key, sd, v.nbytes)))
        out.append(counts)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="an acceptance run's output folder (with grades.jsonl)")
    ap.add_argument("--before", default="a8b00fe", help="the git revision to compare with (default: a8b00fe, "
                                                        "the grader of H200 run 66 and the session after it)")
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--cards", type=Path, default=ROOT / ".gpu_carry" / "cuda_l1" / "cards.jsonl",
                    help="extra task cards (the CUDA-L1 sample's)")
    ap.add_argument("--reference-ms", type=float, default=80.0, help="a computed answer's hold, apart from its bytes")
    ap.add_argument("--reference-ms-per-gib", type=float, default=100.0,
                    help="and per GiB of it: with the default 80, a mean of 94 ms over run 66's verifications, whose "
                         "`verify: reference` held 95 ms on average")
    ap.add_argument("--kept-ms", type=float, default=6.44, help="a kept answer's (run 66's `verify: kept answer`)")
    ap.add_argument("--budget-gib", type=float, default=PINNED_ANSWER_BUDGET_BYTES / 2**30,
                    help="the kept answers' byte budget (default: a GPU host's)")
    args = ap.parse_args()
    records = [json.loads(line) for line in jsonl_lines(args.run / "grades.jsonl")]
    cards = load_catalogue([args.cards] if args.cards.exists() else None)
    missing = sorted({r["task_id"] for r in records} - set(cards))
    by_round = rounds(records)
    cost = lambda nbytes: (args.reference_ms + args.reference_ms_per_gib * nbytes / 2**30) / 1e3  # noqa: E731
    rows = []
    for name, rev in ((f"before ({args.before})", args.before), ("working tree", None)):
        q, p = load_version(rev, "service")._Queue, load_version(rev, "answers").AnswerPool
        rows.append((name, replay(by_round, cards, q, p, args.slots, cost, int(args.budget_gib * 2**30))))
    print(f"# answer reuse replayed from {args.run} ({len(records)} grades, {args.slots} slots, "
          f"{args.budget_gib:g} GiB of kept answers)"
          + (f"; tasks without a card, not counted: {', '.join(missing)}" if missing else ""))
    recorded = []  # what the run itself did (of the tasks with a card), the replay's calibration
    for recs in by_round:
        c = collections.Counter()
        for r in recs:
            for v in answer_sizes(cards[r["task_id"]], r) if r["task_id"] in cards else []:
                c.update(kept=v.kept, computed=v.n - v.kept)
                c["computed_s"] += (v.n - v.kept) * cost(v.nbytes)
        recorded.append(c)
    print("version\tround\tverifications\tkept\tcomputed\tcheck-window seconds for answers (modelled)\t"
          "copied into the pool\tGiB copied")
    for name, per_round in [("recorded in the run", recorded)] + rows:
        for i, c in [*enumerate(per_round, 1), ("all", sum(per_round, collections.Counter()))]:
            copies = f"{c['copied']}\t{c['copied_bytes'] / 2**30:.1f}" if per_round is not recorded else "-\t-"
            print(f"{name}\t{i}\t{c['kept'] + c['computed']}\t{c['kept']}\t{c['computed']}\t"
                  f"{c['kept'] * args.kept_ms / 1e3 + c['computed_s']:.1f}\t{copies}")


if __name__ == "__main__":
    main()
