"""The acceptance's summary (bench/gpu_acceptance.py) read from recorded H200 runs: what it flags, it flags from the
grades the GPU gave."""
import json
import os
import pathlib

import pytest

from bench.gpu_acceptance import summarise
from bench.recorded import jsonl_lines
from grader.contract import GradeRequest, GradeResult, Status
from tests.grader.sources import HONEST_SOFTMAX

RUNS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "measurements"


def _summary(run: str) -> list[str]:
    from bench.grade_corpus import adversarial_requests

    past_clip = {req.attempt_id for req, m in adversarial_requests() if m["past_clip"]}

    rows = [GradeResult.from_json(line) for line in jsonl_lines(RUNS / run / "acc" / "grades.jsonl")]
    meta = {r.attempt_id: {"group": "honest" if r.attempt_id.startswith("adv:honest/") else "other",
                           "past_clip": r.attempt_id in past_clip} for r in rows}
    return summarise(rows, meta, wall_s=100.0, workers=12).splitlines()


def test_an_honest_kernel_stopped_at_the_clip_is_named_in_the_verdict():
    """H200 run 50: grader 0.14.0 as first measured stopped an honest 0.16 ms kernel after one pair at the clip (its
    calls let through their gates, timed at 20-25 ms). "None floored" did not show it; this line does."""
    lines = _summary("2026-12-04-h200-run50")
    assert "  honest kernels floored\t0/9" in lines
    assert "  honest kernels stopped at the clip\t1/9" in lines
    named = [line for line in lines if line.startswith("  STOPPED AT THE CLIP ")]
    assert named and all("adv:honest/bias_leaky_relu_torch_where.py" in line for line in named), named


def test_an_honest_kernel_slow_past_the_clip_by_design_is_named_apart_and_not_counted():
    """H200 run 52: `softmax_fp16_torch_rowchunks_slow` (a Python loop over blocks of 64 rows; runs 28 and 32 timed
    it in full at 100-500 times the expert) stopped at the clip on three sizes. Its case says it is slow past the
    clip, so the verdict counts the 35 others."""
    lines = _summary("2026-12-04-h200-run52")
    assert "  honest kernels stopped at the clip\t0/35 (and 1 slow past the clip by design)" in lines
    named = [line for line in lines if "stopped at the clip, slow past it by design" in line]
    assert len(named) == 3 and all("softmax_fp16_torch_rowchunks_slow" in line for line in named), named
    assert not [line for line in lines if line.startswith("  STOPPED AT THE CLIP ")]


def test_no_honest_kernel_is_stopped_at_the_clip_in_a_run_that_timed_them_in_full():
    lines = _summary("2026-12-04-h200-run51")
    assert "  honest kernels stopped at the clip\t0/12" in lines
    assert not [line for line in lines if line.startswith("  STOPPED AT THE CLIP ")]


def test_the_run_says_what_host_it_ran_on():
    """Round 1 took 91 s on H100 run 102's host and 111-125 s on runs 106-112's with the same code, and no record
    said what the hosts were: the acceptance's environment and summary head now carry the CPU's model, the cores,
    the load, a fixed Python loop's time, the kernel's release (its scheduler's) and its NUMA nodes and balancing,
    read from this host."""
    from bench.hostwatch import cpu_model, host_profile, profile_line

    x86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t: fpu\n"
    assert cpu_model(x86 + x86.replace("8480+", "other")) == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu_model("processor\t: 0\nCPU part\t: 0xd4f\n") == "0xd4f" and cpu_model("") == ""
    profile = host_profile(repeats=1)
    assert profile["cpus"] == len(os.sched_getaffinity(0)) and profile["python_loop_ms"] > 0
    assert profile["cpu_model"] == cpu_model(pathlib.Path("/proc/cpuinfo").read_text())
    line = profile_line(profile)
    assert line.startswith(f"host: {profile['cpu_model'] or 'CPU model unknown'}, {profile['cpus']} cores, load ")
    # the share of the CPUs' time the hypervisor gave to others while the loop ran: H200 run 147's host ran it in
    # 134-145 ms as two runs started and in 76-78 as the two between them did, and nothing said why
    stolen = f" ({profile['loop_steal_pct']:g}% of the CPUs' time stolen meanwhile)"
    assert 0 <= profile["loop_steal_pct"] <= 100 and stolen in line
    numa = pathlib.Path("/proc/sys/kernel/numa_balancing")
    balancing = numa.read_text().strip() if numa.exists() else "?"
    assert line.endswith(f"a fixed Python loop {profile['python_loop_ms']} ms{stolen}, Linux {os.uname().release}, "
                         f"NUMA nodes "
                         f"{len(list(pathlib.Path('/sys/devices/system/node').glob('node[0-9]*')))} (balancing "
                         f"{balancing})"), line
    # the loop read again with the service starting beside it, in the same process (`gpu_acceptance.environment`)
    up = profile_line(dict(profile, python_loop_ms_service_up=140.2))
    assert f"a fixed Python loop {profile['python_loop_ms']} ms{stolen} (140.2 ms with the service starting beside " \
           "it), Linux" in up


def test_the_summary_and_the_log_begin_with_the_card_they_ran_on():
    """A sweep keeps only the summaries, whose first line named the device's model alone: H200 run 147's record
    names no card. The line now carries the fingerprint's UUID and driver where it has them."""
    from bench.gpu_acceptance import head_line

    env = {"date": "2026-12-07 20:09:11 UTC", "device": "NVIDIA H200", "torch": "2.11.0+cu130", "triton": "3.6.0",
           "python": "3.12.3"}
    assert head_line({**env, "fingerprint": {"gpu_uuid": "GPU-5df2e740", "driver": "580.159.04"}}) == (
        "# 2026-12-07 20:09:11 UTC NVIDIA H200 (GPU-5df2e740, driver 580.159.04) torch 2.11.0+cu130 triton 3.6.0 "
        "python 3.12.3")
    assert head_line({**env, "fingerprint": {"kind": "cpu"}}) == (
        "# 2026-12-07 20:09:11 UTC NVIDIA H200 torch 2.11.0+cu130 triton 3.6.0 python 3.12.3")


def test_host_watch_reads_the_host_and_summarises_a_stretch():
    """bench/hostwatch.py: /proc/stat's busy share leaves idle and iowait out; a process's CPU seconds are its user
    and system ticks; a live sampler's summary names the parent's cores and its threads' wake-up delay."""
    import os
    import time

    from bench.hostwatch import HostWatch, cpu_jiffies, host_memory, proc_cpu_s, steal_share

    assert cpu_jiffies("cpu  100 5 20 800 50 3 2 0 0 0\ncpu0 1 2 3\n") == (130, 980, 0)
    # steal (the eighth field) is busy time too, and counted apart; a kernel that lists fewer fields has none
    assert cpu_jiffies("cpu  100 5 20 800 50 3 2 40 0 0\n") == (170, 1020, 40)
    assert cpu_jiffies("cpu  100 5 20 800 50 3 2\n") == (130, 980, 0)
    assert steal_share("cpu  100 5 20 800 50 3 2 40 0 0\n", "cpu  150 5 20 830 50 3 2 60 0 0\n") == 0.2
    assert steal_share(None, "cpu  1 1 1 1 1 1 1 1\n") is None and steal_share("cpu 1\n", "cpu 1\n") is None
    assert host_memory("MemTotal:  131072000 kB\nMemFree: 1 kB\nMemAvailable:   65536000 kB\n") == (
        65536000 * 1024, 131072000 * 1024) and host_memory("MemTotal: 1 kB\n") is None
    hz = os.sysconf("SC_CLK_TCK")
    assert proc_cpu_s(f"42 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 {3 * hz} {hz} 0 0") == 4.0
    watch = HostWatch(lambda: {os.getpid(): "parent"}, tick_s=0.05).start()
    t0 = time.perf_counter()
    deadline = t0 + 5
    while len(watch.samples) < 3 and time.perf_counter() < deadline:
        sum(range(20000))
    watch.stop()
    assert len(watch.samples) >= 3
    cores, late, host = watch.lines(t0, time.perf_counter(), "run")
    assert "host CPUs busy" in cores and "woke late" in late and "host memory available (GiB)" in host, host
    assert "(stolen by the hypervisor median " in cores and all(0 <= s["stolen"] <= 1 for s in watch.samples)
    assert all(s["late_ms"] and min(s["late_ms"]) > -0.1 for s in watch.samples)
    assert watch.lines(0.0, 1.0, "before") == ["  before\tno samples"]
    # With the device's memory in use sampled (NVML's readings on the GPU; here readings as H200 run 65's device
    # gave them, 89.1 GiB at its end and full once), the summary says how full it got.
    readings = iter([80 << 30, (139 << 30) + (1 << 29), 89 << 30] + [89 << 30] * 1000)
    watch = HostWatch(dict, tick_s=0.05, device_used=lambda: next(readings)).start()
    t0 = time.perf_counter()
    while len(watch.samples) < 3 and time.perf_counter() < deadline + 5:
        time.sleep(0.01)
    watch.stop()
    memory = watch.lines(t0, time.perf_counter(), "run")[2]
    assert "device memory used (GiB)" in memory and memory.endswith("max 139.5"), memory
    # With who holds it read every few ticks, the summary breaks the fullest of those readings down by kind.
    gib = 2**30
    by_role = iter([{"used": 90 * gib, "candidate": 40 * gib}, {"used": 130 * gib, "parent": 11 * gib,
                                                                "expert": 50 * gib, "candidate": 60 * gib}]
                   + [{"used": 100 * gib}] * 1000)
    watch = HostWatch(dict, tick_s=0.02, device_used=lambda: 0, device_roles=lambda: next(by_role)).start()
    t0 = time.perf_counter()
    while len(watch.samples) < 9 and time.perf_counter() < deadline + 10:
        time.sleep(0.01)
    watch.stop()
    assert sum(1 for s in watch.samples if s["device_roles"]) >= 3  # every few ticks, not every one
    fullest = watch.lines(t0, time.perf_counter(), "run")[3]
    assert fullest.endswith("(GiB)\tused 130.0; candidate 60.0, expert 50.0, parent 11.0"), fullest


def test_the_lock_model_runs_its_slots_through_the_real_lock_and_prints_a_row_per_variant(capsys):
    """bench/lock_sim.py: a short run of two variants with two slots prints both rows, with timed calls made."""
    from bench.lock_sim import main

    assert main(["--slots", "2", "--seconds", "1.5", "--scale", "0.2",
                 "--variants", "run 59,no check work (the loops alone)"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["run 59", "no check work (the loops alone)"]
    assert all(float(r[3]) > 0 for r in rows), rows  # timed calls a second


def test_builds_ahead_and_the_grades_own_loads_are_summarised():
    """grader.buildahead's records: how each build ahead ended and what it took, beside what the grades' loads were
    served, raised again or compiled themselves. Run 61's grades (before build-ahead) have loads only."""
    from bench.gpu_acceptance import build_lines

    rows = [GradeResult.from_json(line) for line in
            jsonl_lines(RUNS / "2026-12-04-h200-run61" / "acc" / "grades.jsonl")]
    [loads] = build_lines(rows)
    assert loads.startswith("  the grades' own loads\tserved 0, replayed 0, built ")
    ahead = [{"s": 48.0, "outcome": "built", "built": 1, "queued_s": 0.0},
             {"s": 30.0, "outcome": "failed", "failed": 1, "queued_s": 12.0}]
    for r, a, load in zip(rows[:2], ahead, [{"served": 1}, {"replayed": 1}]):
        r.sandbox["ext_cache"] = {"sealed": True, "offered": 1, "ahead": a, "built": 0, "filed": 0, **load}
    first, loads = build_lines(rows[:2])
    assert first == ("  builds ahead\t2: built 1, failed 1; 78 s in all (median 39.0, max 48.0); queued for a builder "
                     "median 6.0 s")
    assert loads == "  the grades' own loads\tserved 1, replayed 1, built 0, filed 0 (of 2 loads offered the cache)"

    # An attempt built ahead whose grade compiled again (CUDA-L1's L1:T3 since run 118): the arguments that differ.
    builder = {"*": "aaaaaaaa", "cpp_sources": "11111111", "extra_ldflags": "22222222", "name": "33333333"}
    rows[0].sandbox["ext_cache"] = {"ahead": {**ahead[1], "compiled": [builder]}, "built": 1, "filed": 1,
                                    "compiled": [{**builder, "*": "bbbbbbbb", "extra_ldflags": "44444444"}]}
    rows[1].sandbox["ext_cache"] = {"ahead": {**ahead[1], "compiled": [builder]}, "built": 1, "filed": 1,
                                    "compiled": [builder], "offered_materials": ["cccccccc:failure"]}
    *_, differs, same = build_lines(rows[:2])
    assert differs == (f"  built ahead, compiled again in its slot\t{rows[0].attempt_id}: "
                       "arguments that differ: extra_ldflags")
    # The same material (H200 run 123's L1:T3): then which entries the grade was offered, by digest and kind.
    assert same == (f"  built ahead, compiled again in its slot\t{rows[1].attempt_id}: the same material; the grade "
                    "was offered cccccccc:failure")


def test_the_answer_replay_counts_every_verification_of_a_recorded_run_once():
    """bench/answer_reuse.py on H200 run 66's grades (the tasks of this catalogue; the CUDA-L1 sample's cards are not
    in a fresh clone): every verification the run recorded is replayed once, in its round, on a kept answer or a
    computed one; the experts' second grades of round 2 find answers their first grades computed."""
    import collections
    import json

    from bench.answer_reuse import answer_sizes, replay, rounds
    from grader.answers import AnswerPool
    from grader.catalogue import load_catalogue
    from grader.service import _Queue

    cards = load_catalogue()
    records = [json.loads(line) for line in jsonl_lines(RUNS / "2026-12-05-h200-run66" / "acc" / "grades.jsonl")]
    by_round = [[r for r in rs if r["task_id"] in cards] for rs in rounds(records)]
    assert [len(rs) for rs in rounds(records)] == [60, 99]  # its round 1 is the demo and CUDA-L1 mix
    got = replay(by_round, cards, _Queue, AnswerPool, slots=12, cost=lambda nbytes: 0.08 + nbytes / 10e9)
    sizes = [[v for r in rs for v in answer_sizes(cards[r["task_id"]], r)] for rs in by_round]
    want = [sum(v.n for v in vs) for vs in sizes]
    assert [c["kept"] + c["computed"] for c in got] == want and all(want), (got, want)
    assert all(c["kept"] <= sum(v.pooled for v in vs) for c, vs in zip(got, sizes))  # fresh seeds are never kept
    assert got[1]["kept"] > 0, got
    every = replay(by_round, cards, _Queue, AnswerPool, slots=12, cost=lambda nbytes: 0.08 + nbytes / 10e9,
                   for_waiting=False)  # every answer computed for a pool seed copied, as before answers_for_waiting
    assert [c["kept"] + c["computed"] for c in every] == want
    # half the copies go (692 against 1,374), and a few uses with them: round 2 grades round 1's experts again, and
    # a round is a call of its own, in which the answers of a task's last attempt of round 1 were not copied
    assert sum(c["copied"] for c in got) < 0.75 * sum(c["copied"] for c in every), (got, every)
    assert sum(c["kept"] for c in got) >= 0.9 * sum(c["kept"] for c in every), (got, every)
    seen = collections.Counter(r["attempt_id"] for r in by_round[1] if r["attempt_id"].startswith("expert:"))
    assert sum(v == 2 for v in seen.values()) >= 12  # graded twice, 16 grades apart


def test_auto_workers_fit_the_devices_memory():
    """`--workers auto`: 12 slots on an H200's 140 GiB (run 66 reached 139.6 with 12), 6 on an H100's 80 (runs 67 and
    68 ran out of it with 12), the production 6 without a GPU; never none."""
    from bench.gpu_acceptance import auto_workers

    assert auto_workers(140.4) == 12 and auto_workers(79.6) == 6 and auto_workers(None) == 6
    assert auto_workers(8.0) == 1 and auto_workers(1000.0) == 12


def test_the_loops_table_says_what_ended_each_sizes_timed_pairs():
    """`loop_lines`: the sizes counted by why their timed pairs stopped (the loop record's `ended`: the interval at
    the target, the budget spent, the clip, the one-pair stop, the most pairs), most first; a record from before it
    was kept counts in none."""
    from types import SimpleNamespace

    from bench.gpu_acceptance import loop_lines

    base = {"held_s": 3.0, "window_wait_s": 2.0, "interleaved": True}
    sizes = [SimpleNamespace(loop={**base, "ended": why}) for why in ("budget", "budget", "interval", "clip")]
    sizes.append(SimpleNamespace(loop=dict(base)))
    line = next(ln for ln in loop_lines(sizes) if ln.startswith("  timed pairs ended by"))
    assert line == "  timed pairs ended by (sizes)\tbudget 2, interval 1, clip 1", line


def test_the_fully_timed_grades_are_split_by_their_tasks_turn_in_the_run():
    """H200 run 69: an expert's first grade against itself took a median 48 s, its second 24 s; the summary splits
    every fully timed grade so (`turn_lines`), the first of each task apart from the later ones."""
    lines = _summary("2026-12-05-h200-run69")
    first = next(ln for ln in lines if ln.startswith("  fully timed grades, a task's first"))
    later = next(ln for ln in lines if ln.startswith("  fully timed grades, a task's later"))
    n_first, n_later = (int(ln.split("\t")[1].split(":")[0]) for ln in (first, later))
    total = next(ln for ln in lines if ln.startswith("  phase medians of "))
    assert n_first + n_later == int(total.split()[3]), (first, later, total)
    med = [float(ln.split("total ")[1].split(",")[0]) for ln in (first, later)]
    assert med[0] > med[1], (first, later)


def test_the_lock_lines_rank_the_work_device_windows_waited_on():
    """`lock_lines`: the lock's states on one line as before, then the device windows' wait on draws by the draws'
    work, largest first with its share of the whole; no such line when nothing waited."""
    from bench.gpu_acceptance import lock_lines

    lock = {"loop_s": 300.0, "idle_s": 40.0, "windows": 10, "draw_windows": 5, "check_windows": 3, "gave_way": 0,
            "blocked_by": {"check window: fetch": 10.0, "loop draw: untimed call": 30.0, "check window: compare": 0.0}}
    lines = lock_lines(lock)
    assert lines[0].startswith("  the device lock's time (s)\tloop 300.0, idle 40.0; 10 device windows"), lines
    assert lines[1].endswith("\tloop draw: untimed call 30.0 (75%), check window: fetch 10.0 (25%), "
                             "check window: compare 0.0 (0%)"), lines
    assert lock_lines({**lock, "blocked_by": {}})[1:] == []
    drawn = lock_lines({**lock, "blocked_by": {}, "draws_by": {"loop draw: fetch": [3, 0.5], "check window: compare":
                                                                [10, 2.0]}})
    assert drawn[1].endswith("\tcheck window: compare 10 (2.0 s), loop draw: fetch 3 (0.5 s)"), drawn


def test_fewer_pairs_are_replayed_on_each_sizes_own_pairs():
    """`cut_at` stops where a loop of fewer pairs would have (the first count past its least whose interval is that
    narrow, else every pair made); `fewer_pairs_lines` replays each row on the pairs the sizes made and reads the
    repeats' precision from the cuts. A floored repeat, a size under 20 us and a record without its pairs count for
    nothing."""
    import dataclasses

    from bench.gpu_acceptance import FEWER_PAIRS, cut_at, fewer_pairs_lines
    from grader.contract import REWARD_FLOOR, SizeResult

    assert cut_at([0.5] * 30, 10, 0.01) == 10 and cut_at([0.5] * 8, 10, 0.01) == 8
    noisy = [(-1.0) ** i for i in range(40)]  # its interval never narrows: every pair made
    assert cut_at(noisy, 10, 0.01) == 40
    narrowing = [(-1.0) ** i for i in range(12)] + [0.0] * 200  # narrow once the zeros outnumber the rest enough
    n = cut_at(narrowing, 10, 0.01)
    assert 12 < n < 212
    from grader.timing import median_ci
    lo, hi = median_ci(narrowing[:n])
    lo1, hi1 = median_ci(narrowing[:n - 1])
    assert (hi - lo) / 2 <= 0.01 < (hi1 - lo1) / 2

    from grader.contract import Status, reward

    rows = jsonl_lines(RUNS / "2026-12-05-h100-run75" / "acc" / "grades.jsonl")
    base = next(r for r in map(GradeResult.from_json, rows) if r.status is Status.CORRECT)

    def grade(logs: list[float] | None, cand_ms: float = 0.05, floored: bool = False) -> GradeResult:
        loop = {"log2_pairs": logs} if logs is not None else {}
        size = SizeResult(size_key="N=1", hidden=False, cand_ms=cand_ms, expert_ms=0.05, speedup=1.0, loop=loop)
        if floored:
            return dataclasses.replace(base, sizes=[size], status=Status.WRONG_OUTPUT, reward=REWARD_FLOOR)
        return dataclasses.replace(base, sizes=[size], reward=reward(Status.CORRECT, [1.0]))

    first, second = grade([0.50] * 30), grade([0.52] * 30)
    repeats = [[first, second, grade([9.0] * 30, floored=True)],  # the floored repeat: no pair
               [grade([0.1] * 30, cand_ms=0.01), grade([0.9] * 30, cand_ms=0.01)],  # under 20 us: no pair
               [grade(None), grade(None)]]  # recorded before the pairs were: nothing
    results = [r for rs in repeats for r in rs]
    lines = fewer_pairs_lines(repeats, results)
    rows = [line.split("\t") for line in lines[2:]]
    assert len(rows) == len(FEWER_PAIRS)
    for (min_reps, target), row in zip(FEWER_PAIRS, rows):
        made = 5 * min_reps  # five sizes with pairs, each cut at its least (constant pairs: no width)
        assert row[:3] == [f"  {min_reps}", str(target), f"{made} ({made / 150:.0%})"], row
        assert row[3:] == ["0.0200", "0.0200", "1"], row
    assert fewer_pairs_lines([[grade(None), grade(None)]], [grade(None)]) == []


def test_a_fresh_baseline_cut_short_has_graded_a_spread_of_its_sample():
    """`spread_first`: every prefix of the baseline's order is spread over its sample (bit-reversed indices), so a
    budget that ends it early leaves a spread of the round graded, not its first task's attempts; nothing is lost or
    repeated."""
    from bench.gpu_acceptance import spread_first

    assert spread_first(list(range(8))) == [0, 4, 2, 6, 1, 5, 3, 7]
    for n in (1, 2, 3, 5, 6, 9):
        order = spread_first(list(range(n)))
        assert sorted(order) == list(range(n)), (n, order)
    assert spread_first(list(range(6)))[:3] == [0, 4, 2]  # three of six: both halves, not the first three


def test_the_workers_started_are_counted_round_by_round():
    """Each round's expert, reference and task (`--with task_workers`) starts are the lock's counts from its start
    to the next round's (the last round's to the stats at the end): a round whose tasks found their workers kept starts
    few."""
    from bench.gpu_acceptance import round_start_lines

    def stats(experts: int, references: int) -> dict:
        return {"worker start, expert: to its hello and gate": [experts, 1.0 * experts],
                "worker start, reference: to its hello and gate": [references, 2.0 * references]}

    rounds = [{"round": 1, "grades": 60, "tasks": set("abc"), "purposes": {}},
              {"round": 2, "grades": 40, "tasks": set("ab"), "purposes": stats(37, 36)}]
    lines = round_start_lines(rounds, stats(41, 42))
    assert lines[1:] == ["  round\tgrades\ttasks\texpert\treference\ttask", "  1\t60\t3\t37\t36\t0",
                         "  2\t40\t2\t4\t6\t0"]
    assert round_start_lines([], {}) == []


def test_the_fresh_baseline_starts_one_interpreter_untimed_before_its_first_grade(tmp_path):
    """`fresh_baseline`: a fresh interpreter is started and ended before the timed sample (`warm_s`), as the service's
    start-up is left out of its rate; the sample's grades are each in an interpreter of their own. Real fresh workers
    on the CPU."""
    if os.geteuid() != 0:
        pytest.skip("fresh workers need the root-run sandbox")
    from bench.gpu_acceptance import fresh_baseline, throughput_lines

    said: list[str] = []
    req = GradeRequest(attempt_id="f0", task_id="softmax_rows_fp32", source=HONEST_SOFTMAX, language="pytorch")
    base = fresh_baseline([req], [], "cpu", 600.0, tmp_path, said.append)
    assert base["n"] == 1 and base["statuses"] == {Status.CORRECT.value: 1}, (base, said)
    assert base["warm_s"] > 0 and base["wall_s"] > 0
    assert base["candidates_started"] == 2  # the warm-up's interpreter, and the grade's own
    lines = throughput_lines({"round1_s": 10.0, "round1_n": 10, "service_t0": 0.0, "baseline": base}, 20.0, 10, 1)
    assert any("after one interpreter started and ended untimed" in line for line in lines), lines


def test_the_out_of_memory_grades_are_counted_by_status_and_by_the_reading_that_judged_them():
    """`oom_line` on recorded grades: H200 run 56's three honest kernels out of memory (judged their own before
    `oom_floor`), H100 run 67's 62 judged the device's; one judged on a full reading before the error came back
    (`memory_watch`) is counted apart. A run with none prints no line."""
    from bench.gpu_acceptance import oom_line

    def rows(run: str) -> list[GradeResult]:
        return [GradeResult.from_json(line) for line in jsonl_lines(RUNS / run / "acc" / "grades.jsonl")]

    assert oom_line(rows("2026-12-04-h200-run56")).startswith("  out of memory (session.oom_floor)\truntime_error 3;")
    run67 = rows("2026-12-05-h100-run67")
    assert oom_line(run67) == ("  out of memory (session.oom_floor)\tinfra_error 62; the device's judged on a reading "
                               "before the error came back: 0")
    [first] = [r for r in run67 if r.reason_code.value == "out_of_memory"][:1]
    first.reason = first.reason.replace(" were free:", " were free, 0.31 s before its error came back:", 1)
    assert oom_line(run67).endswith(": 1")
    assert oom_line(rows("2026-12-06-h100-run98")) == ""


def test_the_fresh_baseline_is_also_compared_on_the_same_attempts():
    """#16 asks for the ratio on the same attempts: H100 run 98's fresh baseline graded 3 attempts in 85 s (the sum of
    their grades' totals, 85.06 s, stands in for the wall its summary rounded); the service's first grades of those
    three took 27.8 slot-seconds of its 6 slots (4.63 s of the device's wall): 18.4x, where the round-1 ratio, over
    the whole round's 60 attempts, read 13.0x. A sampled attempt the service did not grade leaves the line out."""
    import json

    from bench.gpu_acceptance import same_attempts_line, throughput_lines

    run = RUNS / "2026-12-06-h100-run98" / "acc"
    results = [GradeResult.from_json(line) for line in jsonl_lines(run / "grades.jsonl")]
    fresh = [json.loads(line) for line in (run / "grades_fresh.jsonl").read_text().splitlines()]
    base = {"n": 3, "of": 6, "wall_s": 85.06, "statuses": {}, "ids": [r["attempt_id"] for r in fresh]}
    line = same_attempts_line(base, results, 6)
    assert line.startswith("  ratio on the same 3 attempts\tfresh 85.1 s against the service's 27.8 slot-seconds "
                           "over 6 slots (4.63 s): 18.4x"), line
    lines = throughput_lines({"round1_s": 131.0, "round1_n": 60, "service_t0": 0.0, "baseline": base}, 352.0, 279, 6,
                             results)
    assert lines[-1] == line
    assert same_attempts_line(dict(base, ids=base["ids"] + ["not graded"]), results, 6) == ""


def test_the_acceptance_grades_an_infra_error_again_and_counts_only_verdicts(tmp_path):
    """H100 run 102 counted two honest kernels' `infra_error` grades (the device out of memory, judged its own) as
    floored, and graded neither again: the pipeline's client would have (`grade_with_retries`). `grade_round` does,
    on the real service on the CPU: a task whose own inputs differ for one seed is the grader's failure every time,
    so it is tried twice, its first try thrown away, its last counted; an honest attempt is graded once. The summary
    neither floors nor clears on an infra_error, and counts the thrown-away try apart."""
    from bench.gpu_acceptance import grade_round, retried_line
    from grader.service import GraderService
    from pipelines.importers import write_cards
    from pipelines.importers.kernelbench import build_cards
    from tests.conftest import REPO_ROOT

    cases = REPO_ROOT / "tests" / "fixtures" / "own_inputs"
    spec = json.loads((cases / "cases.json").read_text())
    keys = {tuple(map(int, k.split(":"))): (cases / f).read_text() for k, f in spec["tasks"].items()}
    catalogue = tmp_path / "cards.jsonl"
    write_cards(list(build_cards(keys).values()), catalogue)
    reqs = []
    for name in ("unseeded", "honest"):
        key, src_file = spec["attempts"][name][:2]
        level, problem = map(int, key.split(":"))
        reqs.append(GradeRequest(attempt_id=name, task_id=f"kernelbench_L{level}_{problem:03d}",
                                 source=(cases / src_file).read_text(), language="pytorch", entry_point="ModelNew",
                                 profile="cpu", timeout_s=120))
    reqs.append(GradeRequest(**{**reqs[-1].__dict__, "seed": 2017}))  # a repeat in the same round, as round 2's
    failed: list[GradeResult] = []
    with GraderService(mode="zygote", workers=1, device="cpu", catalogue_extra=[str(catalogue)]) as svc:
        outcomes = list(grade_round(svc, reqs, failed))
    assert sorted((o.result.attempt_id, o.tries, o.result.status.value) for o in outcomes) == [
        ("honest", 1, "correct"), ("honest", 1, "correct"), ("unseeded", 2, "infra_error")]
    results = [o.result for o in outcomes]
    retried = [r for r in failed if all(r is not x for x in results)]
    assert len(failed) == 2 and len(retried) == 1
    assert retried_line(results, retried) == ("grades the grader failed, graded again (infra_error)\t1 (infra 1); "
                                              "no verdict (every try failed): 1")
    meta = {r.attempt_id: {"group": "honest", "past_clip": False} for r in results}
    lines = summarise(results, meta, wall_s=10.0, workers=1, retried=retried).splitlines()
    assert "  honest kernels floored\t0/2" in lines
    assert any(line.startswith("  NO VERDICT (the grader failed every try) unseeded\t") for line in lines), lines
    assert "  attempts graded\t2 with a verdict in 10 s with 1 workers: 720 per GPU-hour" in lines


def test_run_102s_out_of_memory_grades_are_not_counted_as_floored_honest_kernels():
    """Run 102's two honest `infra_error` grades (out of memory, judged the device's) are no verdict, not floors."""
    lines = _summary("2026-12-06-h100-run102")
    assert "  honest kernels floored\t0/48" in lines
    assert len([line for line in lines if line.startswith("  NO VERDICT ")]) == 2


def test_round_1s_slot_time_is_split_by_what_the_grades_came_to():
    """H100 run 106's round 1 (60 grades, 6 slots, 125 s): the correct grades at the clip stand apart from the other
    correct ones (5 grades, 18% of the round's slot time, against 24 and 52%), and the one hang holds a slot for its
    whole 60 s budget. The rows are largest first and their shares add up to the whole."""
    from bench.gpu_acceptance import outcome_kind, outcome_lines

    rows = [GradeResult.from_json(line)
            for line in jsonl_lines(RUNS / "2026-12-06-h100-run106" / "acc" / "grades.jsonl")][:60]
    lines = outcome_lines(rows, 6, 125.0)
    assert lines[0] == ("== round 1's slot time by what the grades came to (60 grades, 720 slot-seconds of the 6 "
                        "slots' 750)")
    table = {cells[0].strip(): cells[1:] for cells in (line.split("\t") for line in lines[2:])}
    assert list(table)[:2] == ["correct", "correct, at the clip"]
    assert table["correct"][:3] == ["24", "375.6", "52%"] and table["correct, at the clip"][:3] == ["5", "128.8", "18%"]
    assert table["timeout"][:2] == ["1", "60.4"]
    assert sum(int(cells[0]) for cells in table.values()) == 60
    assert abs(sum(float(cells[1]) for cells in table.values()) - 720) < 1.0
    clipped = next(r for r in rows if outcome_kind(r) == "correct, at the clip")
    assert clipped.status is Status.CORRECT and clipped.reward == -6.0
    assert outcome_lines([], 6, None) == []


def test_round_1s_bound_is_its_longest_grade_or_its_slot_seconds_over_the_slots():
    """H100 run 134's round 1 (60 grades, 6 slots, 83 s): its 476 slot-seconds over 6 slots (79.4 s) bound it more
    than its hang (60.2 s); with one slot the slot-seconds bound alone, and with 60 slots the hang alone, which no
    order of the other grades can bring under 60 s: 3,600 per GPU-hour needs all 60 within 60 s."""
    from bench.gpu_acceptance import bound_line

    rows = [GradeResult.from_json(line)
            for line in jsonl_lines(RUNS / "2026-12-07-h100-run134" / "acc" / "grades.jsonl")][:60]
    assert bound_line(rows, 6) == ("  round 1's bound\tits longest grade 60.2 s (timeout), its 476 slot-seconds over 6 "
                                   "slots 79.4 s: at most 2721 per GPU-hour in any order; 3600 needs the 60 within 60 "
                                   "s, no grade longer and 360 slot-seconds at most")
    assert "at most 454 per GPU-hour" in bound_line(rows, 1)
    assert "over 60 slots 7.9 s: at most 3588 per GPU-hour" in bound_line(rows, 60)
    assert bound_line([], 6) == ""


def test_the_hosts_speed_is_read_before_the_service_and_again_beside_its_start():
    """The acceptance read the fixed loop only once its service was up, in the process whose slot threads, spares and
    builders were starting: on one H100 that reading went 72, 138, 76 and 140 ms by turns in run 152's four runs.
    `environment` keeps the reading made before the service (`host`) and adds the second apart."""
    import types

    from bench.gpu_acceptance import environment

    before = {"python_loop_ms": 1.5, "cpus": 2}
    svc = types.SimpleNamespace(device_name="cpu", fingerprint_id="f", fingerprint={})
    host = environment(svc, before)["host"]
    assert host["python_loop_ms"] == 1.5 and host["cpus"] == 2 and host["python_loop_ms_service_up"] > 1.5
    assert before == {"python_loop_ms": 1.5, "cpus": 2}  # the reading handed in is not changed
    alone = environment(svc)["host"]  # without one, both are read now
    assert alone["python_loop_ms"] > 0 and alone["python_loop_ms_service_up"] == alone["python_loop_ms"]
