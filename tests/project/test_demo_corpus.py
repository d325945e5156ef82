"""The demo corpus of raw agent attempts (demo/): built deterministically, well-formed, honest about intent.

Every record carries `extra.intended`, its author's label. These tests check the corpus itself, not the
grader: counts and shapes meet the minimums, every row parses against the catalogue, every malformed row
is quarantined with its reason code, and the labels are true on CPU (honest candidates match the card's
float64 reference; wrong ones do not; failing ones fail).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton: CPU runs through the interpreter

import collections
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DEMO = REPO_ROOT / "demo"
KINDS = {"correct_fast", "correct_slow", "wrong_output", "compile_error", "runtime_error", "crash", "hang"}
HELD_OUT_FAMILIES = {"attention", "scan", "rotary", "topk"}
RANK = {"correct_fast": 3, "correct_slow": 2}  # intent rank for the learning comparison; any failure is 0


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BUILD = _module("demo_build_corpus", DEMO / "build_corpus.py")


def _catalogue():
    from grader.catalogue import load_catalogue

    return load_catalogue()


def _parse(path: Path, seen: set[str]):
    from pipelines.core.rawattempt import parse_lines

    return list(parse_lines(path.read_bytes().split(b"\n"), str(path), _catalogue().keys(), seen))


def _attempts(name: str = "attempts.jsonl", seen: set[str] | None = None):
    from pipelines.core.rawattempt import RawAttempt

    rows = _parse(DEMO / name, set() if seen is None else seen)
    bad = [r for r in rows if not isinstance(r, RawAttempt)]
    assert not bad, bad[:3]
    return rows


def _intent_rows():
    rows = [(r, "main") for r in _attempts()]
    for arm in ("baseline", "treatment"):
        rows += [(r, arm) for r in _attempts(f"checkpoints/{arm}.jsonl")]
    return rows


# ---------------------------------------------------------------- build


def test_build_is_deterministic_and_committed(tmp_path):
    for out in ("a", "b"):
        subprocess.run([sys.executable, str(DEMO / "build_corpus.py"), "--out", str(tmp_path / out)], check=True,
                       timeout=120)
    a = {p.relative_to(tmp_path / "a"): p.read_bytes() for p in (tmp_path / "a").rglob("*") if p.is_file()}
    b = {p.relative_to(tmp_path / "b"): p.read_bytes() for p in (tmp_path / "b").rglob("*") if p.is_file()}
    assert a.keys() == b.keys() and all(a[k] == b[k] for k in a), "two builds differ"
    for rel, data in a.items():
        if rel.parts[0] != "build":
            assert (DEMO / rel).read_bytes() == data, f"demo/{rel} is stale: run python3 demo/build_corpus.py"
    assert len(a[Path("build/oversized.jsonl")]) > 10_000_000
    tracked = subprocess.run(["git", "check-ignore", "-q", str(DEMO / "build" / "oversized.jsonl")], cwd=REPO_ROOT)
    assert tracked.returncode == 0, "demo/build/ must be git-ignored (the 10 MB row cannot be committed)"


# ---------------------------------------------------------------- shape of the corpus


def test_counts_agents_trajectories_languages():
    rows = _attempts()
    kinds = collections.Counter(r.extra["intended"] for r in rows)
    assert set(kinds) - KINDS <= {k for k in kinds if k.startswith("cheat:")}
    correct = kinds["correct_fast"] + kinds["correct_slow"]
    assert len(rows) >= 130
    assert correct >= 30 and kinds["correct_fast"] >= 10 and kinds["correct_slow"] >= 10
    assert kinds["wrong_output"] >= 15
    assert kinds["compile_error"] >= 8 and kinds["runtime_error"] >= 8
    assert kinds["crash"] >= 2 and kinds["hang"] >= 2
    cheats = [k for k in kinds.elements() if k.startswith("cheat:")]
    rows_hit = {int(k.split(":")[1].split("-")[0]) for k in cheats}
    assert len(cheats) >= 10 and len(rows_hit) >= 6 and rows_hit <= set(range(1, 24))
    assert len({r.task_id for r in rows}) >= 20
    agents = {r.agent: r.model for r in rows}
    assert len(agents) >= 3 and len(set(agents.values())) == len(agents)
    assert sum(r.language == "triton" for r in rows) >= 0.4 * len(rows)
    assert {r.language for r in rows} == {"triton", "pytorch"}
    by_traj = collections.defaultdict(list)
    for r in rows:
        by_traj[r.trajectory_id].append(r)
    for tid, turns in by_traj.items():
        assert 2 <= len(turns) <= 5, tid
        assert [t.turn for t in turns] == list(range(1, len(turns) + 1)), tid
        assert len({(t.agent, t.model, t.task_id) for t in turns}) == 1, tid
        assert all(a.finished_at < b.started_at for a, b in zip(turns, turns[1:])), tid
    assert all(r.started_at < r.finished_at and r.generation_tokens <= r.generation_budget_tokens for r in rows)
    for r in rows:  # the record's source is the candidate file, byte for byte
        assert (REPO_ROOT / r.extra["candidate_file"]).read_text() == r.source, r.attempt_id


def test_checkpoint_sets_are_matched_and_show_a_regression():
    cat = _catalogue()
    arms = {arm: _attempts(f"checkpoints/{arm}.jsonl") for arm in ("baseline", "treatment")}
    assert 30 <= sum(len(v) for v in arms.values()) <= 50
    budgets = {}
    best: dict[str, dict[str, int]] = {}
    for arm, rows in arms.items():
        assert all(r.extra["checkpoint"] == arm for r in rows)
        assert len({r.model for r in rows}) == 1
        assert {cat[r.task_id].family for r in rows} == HELD_OUT_FAMILIES
        for r in rows:
            budgets.setdefault(r.task_id, {}).setdefault(arm, set()).add(r.generation_budget_tokens)
            fam = best.setdefault(arm, {})
            fam[cat[r.task_id].family] = max(fam.get(cat[r.task_id].family, 0), RANK.get(r.extra["intended"], 0))
    assert all(v["baseline"] == v["treatment"] and len(v["baseline"]) == 1 for v in budgets.values()), budgets
    assert arms["baseline"][0].model != arms["treatment"][0].model
    better = {f for f in HELD_OUT_FAMILIES if best["treatment"][f] > best["baseline"][f]}
    worse = {f for f in HELD_OUT_FAMILIES if best["treatment"][f] < best["baseline"][f]}
    assert worse == {"scan"} and len(better) >= 3, (better, worse)


# ---------------------------------------------------------------- ingest


def test_malformed_rows_are_quarantined_with_their_reason():
    from pipelines.core.rawattempt import Quarantined, parse_lines

    seen: set[str] = set()
    first = _attempts(seen=seen)[0].attempt_id
    expected = BUILD.malformed_cases(first)
    got = _parse(DEMO / "malformed.jsonl", seen)
    assert len(got) == len(expected) >= 8
    assert all(isinstance(g, Quarantined) for g in got), [g for g in got if not isinstance(g, Quarantined)]
    assert [g.reason_code for g in got] == [code for code, _, _ in expected]
    big = list(parse_lines([row for _, _, row in BUILD.oversized_cases()], "oversized", _catalogue().keys()))
    assert [g.reason_code for g in big] == [code for code, _, _ in BUILD.oversized_cases()]
    assert len(BUILD.oversized_cases()[0][2]) > 10_000_000


# ---------------------------------------------------------------- labels are true on CPU


def _run_candidate(row, tmp_path: Path, size: dict, seed: int):
    """(output, reference, card) for one call of the candidate at one size."""
    from grader.inputs import make_inputs, resolve_specs, upcast

    card = _catalogue()[row.task_id]
    path = tmp_path / f"cand_{abs(hash(row.attempt_id)) % 10**8}.py"
    path.write_text(row.source)  # Triton's JIT reads the kernel source from a real file
    mod = _module(path.stem, path)
    ref_path = tmp_path / f"ref_{row.task_id}.py"
    ref_path.write_text(card.reference)
    ref = _module(ref_path.stem, ref_path)
    inputs = make_inputs(resolve_specs(card, size), seed, "cpu")
    expect = ref.run(*upcast([t.clone() for t in inputs]))
    return getattr(mod, row.entry_point)(*inputs), expect, card


def _matches(out, expect, card) -> bool:
    import torch

    from grader.compare import compare

    if type(out) is not torch.Tensor or tuple(out.shape) != tuple(expect.shape):
        return False
    if str(out.dtype) != f"torch.{card.output_dtype}":
        return False
    return compare(out, expect, *card.tolerance()).ok


def _by_intent(pred):
    return [pytest.param(r, id=f"{arm}:{r.attempt_id}") for r, arm in _intent_rows() if pred(r.extra["intended"])]


@pytest.mark.parametrize("row", _by_intent(lambda k: k.startswith("correct_")))
def test_honest_candidate_matches_reference_on_cpu(row, tmp_path):
    size = _catalogue()[row.task_id].public_sizes["cpu"][0]
    out, expect, card = _run_candidate(row, tmp_path, size, seed=1234)
    assert _matches(out, expect, card), f"{row.attempt_id} ({row.extra['candidate_file']}) is labelled correct"


@pytest.mark.parametrize("row", _by_intent(lambda k: k == "wrong_output"))
def test_wrong_candidate_misses_reference_on_some_cpu_size(row, tmp_path):
    card = _catalogue()[row.task_id]
    results = [_matches(*_run_candidate(row, tmp_path, size, seed=99)) for size, _ in card.sizes("cpu")]
    assert not all(results), f"{row.attempt_id} is labelled wrong_output but matched on every CPU size"


@pytest.mark.parametrize("row", _by_intent(lambda k: k in ("compile_error", "runtime_error")))
def test_failing_candidate_raises(row, tmp_path):
    size = _catalogue()[row.task_id].public_sizes["cpu"][0]
    with pytest.raises(Exception):  # SyntaxError at load, or an error on the first call
        _run_candidate(row, tmp_path, size, seed=7)
