"""grader.answers: the pool of seeds whose reference answers are kept across attempts, and which calls are verified."""
from __future__ import annotations

import collections
import random

import pytest
import torch

from grader.answers import Answer, AnswerPool, SeedPlan


def _answer(n: int, digest: str | None = None) -> Answer:
    return Answer(torch.zeros(n, dtype=torch.float64), None, digest)


def test_a_pool_is_secret_per_task_and_size_and_puts_the_seeds_with_kept_answers_first():
    pool = AnswerPool(seeds_per_size=8)
    rng = random.Random(1)
    first = pool.order("t@1", "N=4", rng)
    assert len(set(first)) == 8 and sorted(pool.order("t@1", "N=4", rng)) == sorted(first)  # the same pool
    assert not set(first) & set(pool.order("t@1", "N=8", rng)) and not set(first) & set(pool.order("t@2", "N=4", rng))
    assert AnswerPool(seeds_per_size=8).order("t@1", "N=4", rng) != first  # drawn from the OS per service
    pool.put("t@1", "N=4", first[5], _answer(4))
    pool.put("t@1", "N=4", first[2], _answer(4))
    for _ in range(20):
        again = pool.order("t@1", "N=4", rng)
        assert set(again[:2]) == {first[5], first[2]} and sorted(again) == sorted(first)
    orders = {tuple(pool.order("t@1", "N=4", rng)) for _ in range(20)}
    assert len(orders) > 1  # each attempt's order is its own (the grade's secret generator)


def test_kept_answers_stay_under_their_byte_budget_least_recently_used_out_first():
    pool = AnswerPool(budget_bytes=3 * 8 * 100)
    for seed in (1, 2, 3):
        pool.put("t", "s", seed, _answer(100))
    assert pool.get("t", "s", 1) is not None  # 1 is now the most recently used
    pool.put("t", "s", 4, _answer(100))
    assert pool.get("t", "s", 2) is None and all(pool.get("t", "s", k) is not None for k in (1, 3, 4))
    pool.put("t", "s", 5, _answer(1000))  # larger than the whole budget: not kept, nothing dropped for it
    assert pool.get("t", "s", 5) is None and pool.held_bytes == 3 * 800
    stats = pool.stats()
    assert stats["answers_computed"] == 5 and stats["answers_dropped"] == 1 and stats["answers_held"] == 3
    assert stats["answers_kept_used"] == 4
    assert pool.get("t", "other size", 1) is None and pool.get("other task", "s", 1) is None


def test_the_answers_that_save_least_per_byte_go_first_and_one_nobody_uses_falls_behind():
    """Greedy-dual-size: an answer's worth is what computing it cost over its bytes. A large answer that cost what
    one small one did goes before the small ones, though they are older; a new answer worth less than what would
    have to go for it is not kept, and nothing goes for it; an answer twice as dear per byte as the rest but never
    used falls behind as the pool ages."""
    mib = 1 << 17  # float64 elements in a MiB
    pool = AnswerPool(budget_bytes=10 << 20)
    for seed in (2, 3):
        pool.put("t", "s", seed, _answer(mib), cost_s=0.1)
    pool.put("t", "s", 1, _answer(8 * mib), cost_s=0.1)  # 8 MiB
    pool.put("t", "s", 4, _answer(mib), cost_s=0.1)  # past the budget: the large one goes, not the oldest
    assert pool.get("t", "s", 1) is None and all(pool.get("t", "s", k) for k in (2, 3, 4))
    assert pool.held_bytes == 3 << 20 and pool.stats()["answers_dropped"] == 1
    for _ in range(100):  # each use ranks its answer again (the heap is rebuilt as used entries go stale)
        assert all(pool.get("t", "s", k) for k in (2, 3, 4))
    pool.put("t", "s", 5, _answer(8 * mib), cost_s=0.1)  # cheaper per byte than any it would displace
    assert pool.get("t", "s", 5) is None and all(pool.get("t", "s", k) for k in (2, 3, 4))

    pool = AnswerPool(budget_bytes=10 << 20)
    pool.put("x", "s", 1, _answer(4 * mib), cost_s=10.0)
    pool.put("y", "s", 1, _answer(5 * mib), cost_s=0.001)
    pool.put("n", "s", 1, _answer(8 * mib), cost_s=0.1)  # room only if x went too, which is worth more per byte
    assert pool.get("n", "s", 1) is None and pool.get("x", "s", 1) and pool.get("y", "s", 1)
    assert pool.held_bytes == 9 << 20 and pool.stats()["answers_dropped"] == 1  # the new one, and only it

    def aged(fresh: int) -> AnswerPool:
        pool = AnswerPool(budget_bytes=6 << 20)
        pool.put("u", "s", 1, _answer(2 * mib), cost_s=0.4)  # 2 MiB, twice as dear per byte as what follows
        for i in range(fresh):
            pool.put("w", "s", i, _answer(mib), cost_s=0.1)
        return pool

    assert aged(6).get("u", "s", 1) is not None  # the cheaper ones went first
    assert aged(12).get("u", "s", 1) is None  # unused, it fell behind as each drop aged the pool


def test_admit_says_before_the_copy_what_put_would_do_and_counts_what_it_refuses_as_put_would():
    """`admit` is asked before an answer is copied into page-locked memory: it refuses what `put` would not keep,
    leaves the pool as it was either way, and a refusal counts as one computed and dropped answer, as `put`'s does.
    An answer no attempt of its task waits for is never admitted."""
    mib = 1 << 17
    nbytes = 8 * mib * 8

    def pool_of() -> AnswerPool:
        pool = AnswerPool(budget_bytes=10 << 20)
        for seed in (2, 3):
            pool.put("t", "s", seed, _answer(mib), cost_s=0.1)
        return pool

    said, did = pool_of(), pool_of()
    assert said.admit("t", "s", 1, nbytes, cost_s=0.1)  # room made by dropping nothing yet: it fits
    assert said.stats() == did.stats() and said.held_bytes == 2 << 20  # nothing changed by asking
    did.put("t", "s", 1, _answer(8 * mib), cost_s=0.1)
    assert did.get("t", "s", 1) is not None
    # an 8 MiB answer that would displace one worth more per byte: refused by both, counted alike
    full_said, full_did = pool_of(), pool_of()
    for pool in (full_said, full_did):
        pool.put("x", "s", 1, _answer(6 * mib), cost_s=10.0)
    assert not full_said.admit("n", "s", 1, nbytes, cost_s=0.1)
    full_did.put("n", "s", 1, _answer(8 * mib), cost_s=0.1)
    assert full_did.get("n", "s", 1) is None
    for key in ("answers_computed", "answers_dropped", "answers_held"):
        assert full_said.stats()[key] == full_did.stats()[key]
    assert full_said.held_bytes == full_did.held_bytes == 8 << 20
    assert not full_said.admit("t", "s", 2, mib * 8, cost_s=0.1)  # kept already
    assert not full_said.admit("t", "s", 9, 11 << 20, cost_s=99.0)  # larger than the whole budget

    pool = pool_of()
    assert not pool.admit("t", "s", 7, mib * 8, cost_s=5.0, wanted=False)  # no attempt of its task waits
    assert pool.stats()["answers_unwanted"] == 1 and pool.stats()["answers_computed"] == 3
    assert pool.held_bytes == 2 << 20


def test_a_plan_gives_every_seed_once_and_the_lowest_priority_pooled_calls_the_seeds_of_kept_answers():
    order = list(range(100, 132))  # what AnswerPool.order gives: kept answers first
    for r in range(50):
        plan = SeedPlan(order, check_calls=2, positions=153, pooled=23, rng=random.Random(r))
        assert plan.check == [100, 101] and plan.check_seed(0) == 100 and plan.check_seed(2) is None
        assert sorted(plan.calls) == list(range(23)) and plan.call_seed(23) is None and plan.call_seed(152) is None
        seeds = plan.check + list(plan.calls.values())
        assert len(set(seeds)) == len(seeds) == 25 and plan.pool == frozenset(seeds)
        by_priority = sorted(range(23), key=plan.priority.__getitem__)
        assert [plan.calls[k] for k in by_priority] == list(range(102, 125))
        # a loop of min_reps pairs makes exactly the pooled calls: its verified calls take the first seeds after the
        # check calls', those whose answers are kept
        assert sorted(plan.calls[k] for k in plan.verified(23, 4)) == [102, 103, 104, 105]
    short = SeedPlan(order[:5], check_calls=2, positions=10, pooled=8, rng=random.Random(0))  # a small pool
    assert len(short.calls) == 3 and set(short.calls.values()) == {102, 103, 104}
    assert SeedPlan([], check_calls=2, positions=10, pooled=8, rng=random.Random(0)).pool == frozenset()


def test_the_verified_calls_are_a_uniformly_random_choice_among_those_made_however_many():
    """Whatever the loop's length, every call made is as likely to be verified (threat 12: a candidate that turns
    bad after some calls is caught wherever it turns), and the choice is the plan's alone."""
    for made, n in ((23, 4), (8, 4), (60, 4)):
        counts = collections.Counter()
        trials = 4000
        for r in range(trials):
            plan = SeedPlan(list(range(32)), check_calls=2, positions=153, pooled=23, rng=random.Random(r))
            chosen = plan.verified(made, n)
            assert len(set(chosen)) == n and all(0 <= k < made for k in chosen)
            counts.update(chosen)
        expected = trials * n / made
        assert all(abs(counts[k] - expected) < 5 * expected ** 0.5 for k in range(made)), (made, counts)
    plan = SeedPlan([], check_calls=2, positions=5, pooled=5, rng=random.Random(0))
    assert sorted(plan.verified(3, 10)) == [0, 1, 2]  # never more than were made


@pytest.mark.gpu
def test_an_answer_on_the_device_is_kept_page_locked_on_the_host():
    """The pool holds no device memory (H200 run 65: 12 GiB of answers there left an honest attempt out of
    memory); a kept answer is copied back onto the device at the copy engine's speed."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from grader.answers import kept_copy

    ref = torch.randn(1000, 37, dtype=torch.float64, device="cuda")
    kept = kept_copy(ref)
    assert kept.device.type == "cpu" and kept.is_pinned() and torch.equal(kept.to("cuda"), ref)
    assert kept_copy(None) is None
