"""bench/expert_bias.py on the committed GPU runs: the experts' self-grades read together, one-sided ones first."""
import pathlib

import pytest

from bench.expert_bias import main, read_runs, sign_test_p, table

RUNS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "measurements"


def test_the_sign_test_is_two_sided_and_exact():
    assert sign_test_p(5, 10) == 1.0
    assert sign_test_p(0, 10) == pytest.approx(2 / 1024)
    assert sign_test_p(10, 10) == sign_test_p(0, 10)
    assert sign_test_p(1, 10) == pytest.approx(2 * 11 / 1024)
    assert sign_test_p(0, 0) == 1.0


def test_col_mean_grades_above_itself_run_after_run_on_both_cards():
    """The committed runs up to H100 run 101: col_mean_fp32's expert graded above 0 against itself in 69 of 71 of
    its unfloored self-grades (H100 and H200 alike, pair orders ABAB and ABBA): the most one-sided of the experts."""
    rows = read_runs(RUNS)
    first = table(rows, 5)[0]
    assert first[0] == "col_mean_fp32" and float(first[3]) > 0.01 and float(first[5]) < 1e-6, first
    for card in ("h100", "h200"):
        part = [r for r in rows if r["card"] == card and r["expert"] == "col_mean_fp32"]
        assert sum(r["reward"] > 0 for r in part) > 0.85 * len(part), card
    assert table(rows, 10_000) == []  # --min-runs leaves out experts seen in fewer runs


def test_no_runs_is_a_clear_error(tmp_path, capsys):
    assert main(["--runs", str(tmp_path)]) == 2
    assert "expected */acc/grades.jsonl" in capsys.readouterr().err


def test_the_split_by_the_experts_worker_keeps_col_mean_above_itself_either_way():
    """A worker started for the grade and one kept from an earlier grade: col_mean_fp32 grades above itself in both
    (the committed runs up to H100 run 145: 59 of 63 started, 45 of 48 kept), so the expert worker's age does not
    explain its bias. Later runs are left out: the finding is these runs' (H100 runs 148 and 149 each graded a kept
    col_mean_fp32 below itself, -0.0025 and -0.0037)."""
    rows = [r for r in read_runs(RUNS) if int(r["run"].rsplit("run", 1)[1]) <= 145]
    assert {r["started"] for r in rows} == {True, False}
    for started in (True, False):
        part = [r for r in rows if r["started"] is started and r["expert"] == "col_mean_fp32"]
        assert len(part) >= 20 and sum(r["reward"] > 0 for r in part) > 0.9 * len(part), started


def test_gzipped_grades_are_read_and_older_graders_left_out():
    """H100 run 102's grades are committed gzipped (over 2 MB) and read; the 2026-12-01 runs (grader 0.7.0, gzipped
    too) timed before the launch gate and are left out unless asked for."""
    rows = read_runs(RUNS)
    assert any(r["run"] == "2026-12-06-h100-run102" for r in rows)
    assert not any(r["run"].startswith("2026-12-01-") for r in rows)
    assert any(r["run"].startswith("2026-12-01-") for r in read_runs(RUNS, min_version="0.0"))
