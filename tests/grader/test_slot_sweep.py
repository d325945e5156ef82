"""The slot sweep (bench/slot_sweep.py): its figures read from recorded GPU summaries, its runs parsed with clear
errors, and one real sweep on the CPU end to end."""
import pathlib
import re
import subprocess
import sys

import pytest

from bench.slot_sweep import parse_runs, read_summary, row

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs" / "measurements"
GRADER_FILES = {p.name for p in (ROOT / "grader").glob("*.py")}


def test_a_summary_gives_the_sweeps_figures_as_the_h100_printed_them():
    """H100 run 90's six slots: 60 in 88 s, 8.66 slot-seconds a grade, CUDA starts 0.90/1.24 s."""
    got = read_summary((RUNS / "2026-12-05-h100-run90" / "w6.summary.txt").read_text())
    assert got["slots"] == 6 and got["attempts"] == 60 and got["round1_s"] == 88 and got["rate"] == 2457
    assert got["tasks"] == 37 and not got["cut_off"]
    assert got["slot_s_per_grade"] == pytest.approx(519.7 / 60)
    assert got["cuda_start_s"] == pytest.approx({"expert": 0.90118, "reference": 1.24211})
    assert got["lock"] == {"window": 20.1, "draws_held": 42.3, "idle": 6.8}
    assert got["device_gib_max"] == 74.2
    assert "host_loop_ms" not in got and got["cpu_busy_pct"] == 38  # run 90 came before the host's line
    line = row("w6", got, {"correct": 25, "timeout": 1})
    assert line[5] == "2457" and line[6] == "0" and line[8] == "0.90/1.24/-" and line[13] == "correct 25, timeout 1"
    # the tries the grader failed, graded again (H100 run 100's 8 slots ended 9 of 36 infra_error)
    assert row("w8", dict(got, attempts=27, rate=2097), {"correct": 27}, again=9)[6] == "9"


def test_a_summary_without_a_figure_leaves_it_out_and_the_row_says_so():
    """An H200 summary from before the tasks line (run 82), and a run cut off before any table."""
    got = read_summary((RUNS / "2026-12-05-h200-run82" / "summary.txt").read_text())
    assert got["slots"] == 12 and got["rate"] == 1794 and "tasks" not in got
    assert row("w12", got, {})[3] == "-"
    assert read_summary("") == {}
    assert row("w6", {}, {}) == ["w6", "-", "-", "-", "-", "-", "0", "-", "-/-/-", "-/-/-", "-", "-", "-/-", "-"]


def test_a_summary_gives_the_hosts_speed_and_how_busy_its_cpus_were_in_round_1():
    """The host's fixed loop as the run started and its CPUs' busy share over round 1 (H100 run 145: 153.8 ms, 59%),
    and with the share the hypervisor took, once the summary gives it: H200 run 147's ABAB ran its A runs on a host
    twice as slow as its B runs, and the table did not say so."""
    got = read_summary((RUNS / "2026-12-07-h100-run145" / "acc" / "summary.txt").read_text())
    assert got["host_loop_ms"] == 153.8 and got["cpu_busy_pct"] == 59 and "stolen_pct" not in got
    assert row("w6", got, {})[11:13] == ["153.8", "59/-"]
    stolen = "  round 1\t95 samples over 50 s; host CPUs busy (of 16) median 73%, p90 83% (stolen by the hypervisor " \
             "median 12.5%, p90 30.0%); runnable threads median 13, p90 17\n"
    got = read_summary("# host: x, 16 cores, load 1 1 1 at the start, a fixed Python loop 76.3 ms (3% of the CPUs' "
                       "time stolen meanwhile), Linux 6\n" + stolen)
    assert got == {"host_loop_ms": 76.3, "cpu_busy_pct": 73, "stolen_pct": 12.5}
    assert row("w6", got, {})[11:13] == ["76.3", "73/12.5"]
    # since run 153 the loop is read before the service starts, and again beside its start (H100 run 152 read only
    # the second: 72, 138, 76 and 140 ms by turns on one machine)
    got = read_summary("# host: x, 16 cores, load 1 1 1 at the start, a fixed Python loop 76.3 ms (3% of the CPUs' "
                       "time stolen meanwhile) (140.2 ms with the service starting beside it), Linux 6\n")
    assert got == {"host_loop_ms": 76.3, "host_loop_up_ms": 140.2} and row("w6", got, {})[11] == "76.3/140.2"


def test_runs_are_slots_or_slots_by_demo_attempts_and_anything_else_is_refused():
    assert parse_runs("12, 6,8x96,6+keep_size_memory+host_verify,6x96+keep_tasks:10/0.015,8-task_workers+nice_builds,"
                      "8:10/0.015/1,6-start_ahead@clip_reps=3@give_way_s=0.25:10/0.015", 48) == [
        (12, 48, (), None), (6, 48, (), None), (8, 96, (), None), (6, 48, ("keep_size_memory", "host_verify"), None),
        (6, 96, ("keep_tasks",), (10, 0.015)), (8, 48, ("-task_workers", "nice_builds"), None),
        (8, 48, (), (10, 0.015, 1)), (6, 48, ("-start_ahead", "@clip_reps=3", "@give_way_s=0.25"), (10, 0.015))]
    for bad in ("", "0", "six", "6x", "6y96", "6+", "6-", "6+Start", "6:10", "6:0/0.01", "6:10/", "6:10/1.5x",
                "6:10/0.015/", "6:10/0.015/x", "6/1", "6@clip_reps", "6@clip_reps=", "6@Clip=3", "6@clip_reps=-1"):
        with pytest.raises(ValueError, match="--runs"):
            parse_runs(bad, 48)


def test_a_sweep_on_the_cpu_grades_each_run_and_leaves_three_files(tmp_path):
    out = tmp_path / "sweep"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "slot_sweep.py"), "--out", str(out), "--runs",
                           "1-task_workers@clip_reps=2,2x3+host_verify:2/0.02/0", "--demo", "2", "--cuda-l1", "0",
                           "--run-s", "120",
                           "--device", "cpu", "--sample-stacks", "5"],  # the last passed on to the acceptance
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["summaries.txt", "sweep.log", "sweep.txt"]
    lines = (out / "sweep.txt").read_text().splitlines()
    assert lines[0].startswith("run\tslots\tattempts") and [r.split("\t")[:3] for r in lines[1:]] == [
        ["w1-task_workers@clip_reps=2", "1", "2"], ["w2x3+host_verify:2/0.02/0", "2", "3"]]
    assert all(r.split("\t")[5].isdigit() for r in lines[1:]), lines  # a rate, not '-'
    log = (out / "sweep.log").read_text()
    assert "--with host_verify --min-reps 2 --target-halfwidth 0.02 --warmup-pairs 0" in log
    assert log.count("--min-reps") == 1 and log.count("--warmup-pairs") == 1
    assert "--without task_workers" in log and log.count("--without") == 1
    assert "--without task_workers --effort clip_reps=2" in log and log.count("--effort") == 1
    assert ", clip_reps 2; switched on" in log  # the run's service was given it
    # each row says what host the run had: the fixed loop before its service and beside its start, the CPUs'
    # busy/stolen shares over round 1
    assert all(re.fullmatch(r"[\d.]+/[\d.]+", r.split("\t")[11]) and re.fullmatch(r"\d+/[\d.]+", r.split("\t")[12])
               for r in lines[1:]), lines
    # and where the slot threads were, by the grader's code (`--sample-stacks`, bench/stacksample.py)
    text = (out / "summaries.txt").read_text()
    assert text.count("== where the slot threads were") == 2, text[-3000:]
    shares = re.findall(r"  round 1\t  (\w+\.py):\w+:\d+\t([\d.]+)%\t\d+", text)
    assert shares and all(f in GRADER_FILES for f, _ in shares), shares


def test_a_sweep_refuses_a_field_the_acceptance_would_before_any_run(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "slot_sweep.py"), "--out", str(tmp_path / "sweep"),
                           "--runs", "1,1@slow_loops=0", "--device", "cpu"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "--runs: 'slow_loops' is no numeric field of Effort" in done.stderr, done.stderr
    assert not (tmp_path / "sweep").exists()


def test_the_acceptance_sets_numeric_effort_fields_by_name_and_refuses_anything_else():
    """`bench/gpu_acceptance.py --effort` (the sweep's `@field=value`): each value takes its field's type; a switch
    (a bool field: `--with`/`--without`), an unknown name, a value of the wrong type or a negative one is refused by
    name."""
    from bench.gpu_acceptance import effort_fields

    assert effort_fields("clip_reps=3, verify_timed=2,give_way_s=0.25") == {"clip_reps": 3, "verify_timed": 2,
                                                                           "give_way_s": 0.25}
    assert effort_fields("") == {}
    assert type(effort_fields("verify_fraction=1")["verify_fraction"]) is float
    for bad, says in (("slow_loops=1", "no numeric field"), ("clip=3", "no numeric field"),
                      ("clip_reps=2.5", "is not an int"), ("clip_reps=x", "is not an int"),
                      ("give_way_s=-1", "negative")):
        with pytest.raises(ValueError, match=says):
            effort_fields(bad)
