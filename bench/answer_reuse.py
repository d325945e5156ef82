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

What it does not model: a grade's own time moving with the change (its verifications on kept answers are shorter),
the answers' real costs (each is counted at the run's mean), and which of a grade's timed calls were verified (the
pool gives them kept seeds first, as `SeedPlan` does). Its first rows are what the run recorded, to check the
replay of `--before` against: on H200 run 66 (whose grader `--before` is), 45 kept and 638 computed in round 1 and
5 and 1,225 after, where the replay gives 47 and 636, 0 and 1,230. So it ranks two policies on a run's mix and
says what the device lock's check windows would save; the GPU run measures it.
"""
from __future__ import annotations

import argparse
import collections
import heapq
import json
import math
import random
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.answers import PINNED_ANSWER_BUDGET_BYTES  # noqa: E402
from grader.catalogue import load_catalogue  # noqa: E402
from grader.contract import GradeRequest  # noqa: E402
from grader.taskcard import resolve_shape, size_key  # noqa: E402

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


def answer_sizes(card, record: dict) -> list[tuple[str, int, int]]:
    """(size key, answer bytes, verifications) of each size the grade verified at; a hidden size (its key not
    in the record) is the card's hidden sizes in order."""
    hidden = [s for s, h in card.sizes("gpu") if h]
    out, k = [], 0
    for s in record.get("sizes") or []:
        got = (s.get("loop") or {}).get("answers")
        if s["size_key"] == "hidden":
            size, k = hidden[min(k, len(hidden) - 1)], k + 1
        else:
            size = next((z for z, _ in card.sizes("gpu") if size_key(z) == s["size_key"]), None)
        if not got or size is None:
            continue
        n = int(got.get("kept", 0)) + int(got.get("computed", 0))
        out.append((size_key(size), 8 * math.prod(resolve_shape(card.output_shape, size)), n))
    return out


def replay(records: list[list[dict]], cards: dict, queue_cls, pool_cls, slots: int, cost_s: float,
           budget_bytes: int = PINNED_ANSWER_BUDGET_BYTES, seed: int = 0, checks: int = 2
           ) -> list[collections.Counter]:
    """Each round's verifications on kept answers and on computed ones, through `queue_cls` and `pool_cls`. At each
    size, the first `checks` verifications (the check calls') come at its start, the rest after its loop; an answer
    computed is kept `cost_s` later."""
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
            for i, (key, nbytes, n) in enumerate(sizes):
                order += 1
                heapq.heappush(events, (now + lead + each * i, order, slot, "size",
                                        (r["task_id"], key, nbytes, n, now + lead + each * (i + 0.9))))
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
                try:
                    pool.put(task, key, sd, answer, cost_s=cost_s)
                except TypeError:  # a pool that does not weigh cost
                    pool.put(task, key, sd, answer)
                continue
            if kind == "size":  # the size's plan (`SeedPlan`: the check calls take the first seeds); the check
                task, key, nbytes, n, after = payload  # calls' answers now, the timed calls' after the loop
                seeds = pool.order(task, key, rng)[:n]
                order += 1
                heapq.heappush(events, (after, order, slot, "verify", (task, key, nbytes, seeds[checks:])))
                seeds = seeds[:checks]
            else:
                task, key, nbytes, seeds = payload
            for sd in seeds:
                if pool.get(task, key, sd) is not None:
                    counts["kept"] += 1
                else:
                    counts["computed"] += 1
                    order += 1
                    heapq.heappush(events, (now + cost_s, order, slot, "put", (task, key, sd, nbytes)))
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
    ap.add_argument("--reference-ms", type=float, default=94.96, help="a computed answer's hold (run 66's mean "
                                                                      "`verify: reference`)")
    ap.add_argument("--kept-ms", type=float, default=6.44, help="a kept answer's (run 66's `verify: kept answer`)")
    ap.add_argument("--budget-gib", type=float, default=PINNED_ANSWER_BUDGET_BYTES / 2**30,
                    help="the kept answers' byte budget (default: a GPU host's)")
    args = ap.parse_args()
    records = [json.loads(line) for line in (args.run / "grades.jsonl").read_text().splitlines() if line.strip()]
    cards = load_catalogue([args.cards] if args.cards.exists() else None)
    missing = sorted({r["task_id"] for r in records} - set(cards))
    by_round = rounds(records)
    rows = []
    for name, rev in ((f"before ({args.before})", args.before), ("working tree", None)):
        q, p = load_version(rev, "service")._Queue, load_version(rev, "answers").AnswerPool
        rows.append((name, replay(by_round, cards, q, p, args.slots, args.reference_ms / 1e3,
                                  int(args.budget_gib * 2**30))))
    print(f"# answer reuse replayed from {args.run} ({len(records)} grades, {args.slots} slots, "
          f"{args.budget_gib:g} GiB of kept answers)"
          + (f"; tasks without a card, not counted: {', '.join(missing)}" if missing else ""))
    recorded = []  # what the run itself did, the replay's calibration
    for recs in by_round:
        c = collections.Counter()
        for r in recs:
            for s in r.get("sizes") or []:
                c.update({k: int(v) for k, v in ((s.get("loop") or {}).get("answers") or {}).items()
                          if k in ("kept", "computed")})
        recorded.append(c)
    print("version\tround\tverifications\tkept\tcomputed\tcheck-window seconds for answers")
    for name, per_round in [("recorded in the run", recorded)] + rows:
        total = collections.Counter()
        for i, c in enumerate(per_round, 1):
            total += c
            print(f"{name}\t{i}\t{c['kept'] + c['computed']}\t{c['kept']}\t{c['computed']}\t"
                  f"{(c['kept'] * args.kept_ms + c['computed'] * args.reference_ms) / 1e3:.1f}")
        print(f"{name}\tall\t{total['kept'] + total['computed']}\t{total['kept']}\t{total['computed']}\t"
              f"{(total['kept'] * args.kept_ms + total['computed'] * args.reference_ms) / 1e3:.1f}")


if __name__ == "__main__":
    main()
