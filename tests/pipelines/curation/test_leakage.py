"""Leakage checks on real corpora: planted leaks are caught, the clean split reports nothing."""
from __future__ import annotations

import ast
import dataclasses
import itertools
import json
import re

import pytest

from pipelines.curation.families import Family, Source, TaskRef, all_tasks, kernelbench_task_id
from pipelines.curation.leakage import (JACCARD_THRESHOLD, CodeItem, LeakCheck, jaccard, leakage_report,
                                        lineage_across_splits, near_duplicate_scan, near_duplicates,
                                        shape_variants_across_splits, shingles, similarity, task_in_two_splits)
from pipelines.curation.split_policy import DEFAULT_POLICY, Split, SplitPolicy, build_manifest
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT / ".." / "shared" / "data"
# Same KernelBench task, candidate written separately for the H100 and the A100 (texts differ).
REAL_PAIRS = [(1, 17), (1, 69), (2, 1), (2, 14), (3, 20), (3, 33), (3, 41)]


def _custom_codes(gpu: str) -> dict[tuple[int, int], str]:
    out = {}
    for line in (DATA / "cuda-l1" / f"{gpu}.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["custom_code"] and r["custom_code"].strip() != "None":
            out[(int(r["level_id"]), int(r["task_id"]))] = r["custom_code"]
    return out


@pytest.fixture(scope="module")
def h100():
    return _custom_codes("h100")


@pytest.fixture(scope="module")
def a100():
    return _custom_codes("a100")


@pytest.fixture(scope="module")
def tasks():
    return all_tasks(DATA)


@pytest.fixture(scope="module")
def manifest(tasks):
    return build_manifest(DEFAULT_POLICY, tasks)


def _raw_jaccard(a: str, b: str) -> float:
    """Whitespace-token 5-shingles with no normalisation, for contrast in the report."""
    def sh(s):
        t = s.split()
        return {" ".join(t[i:i + 5]) for i in range(len(t) - 4)}
    x, y = sh(a), sh(b)
    return len(x & y) / len(x | y)


def test_real_cross_gpu_candidates_of_one_task_are_near_duplicates(h100, a100, capsys):
    lines = []
    for key in REAL_PAIRS:
        assert h100[key] != a100[key]
        sim, raw = similarity(h100[key], a100[key]), _raw_jaccard(h100[key], a100[key])
        lines.append(f"L{key[0]}/{key[1]}: normalised {sim:.3f}, raw {raw:.3f}")
        assert sim >= JACCARD_THRESHOLD, lines[-1]
    with capsys.disabled():
        print("\nmeasured h100-vs-a100 similarity:", "; ".join(lines))


def _rename(src: str, names: list[str]) -> str:
    """Rename identifiers as a copier would: locals, functions, kernels and self attributes, never
    the API members of other objects (`torch.cuda.is_available`)."""
    for i, n in enumerate(names):
        src = re.sub(rf"(?<![\w.]){n}\b|(?<=self\.){n}\b", f"zz_name_{i}", src)
    return src


def test_renamed_and_reformatted_copies_stay_near_duplicates(h100, capsys):
    src = h100[(1, 19)]  # ReLU: Python wrapper plus CUDA inside a string
    names = ["cuda_kernel", "optimized_relu_kernel", "tid", "stride", "in_val", "out_val", "remaining_start",
             "cuda_code", "input", "output"]
    assert all(re.search(rf"\b{n}\b", src) for n in names)
    renamed = _rename(src, names)
    # Reformat: the AST printed back (comments gone, quotes, wrapping and the CUDA string's layout
    # all rewritten), then new comments added.
    reformatted = "\n".join(ln + "  # reviewed" if ln.rstrip().endswith(":") and not ln.startswith(" " * 8) else ln
                            for ln in ast.unparse(ast.parse(src)).splitlines())
    assert reformatted.count("# reviewed") >= 3 and 'cuda_code = """' in src and "cuda_code = '\\n" in reformatted
    r1, r2 = similarity(src, renamed), similarity(src, reformatted)
    with capsys.disabled():
        print(f"\nrenamed copy {r1:.3f} (raw {_raw_jaccard(src, renamed):.3f}); "
              f"reformatted copy {r2:.3f} (raw {_raw_jaccard(src, reformatted):.3f})")
    assert r1 == 1.0 and r2 >= 0.9


@pytest.fixture(scope="module")
def shingled(h100, a100):
    return {("h100", k): shingles(v) for k, v in h100.items()} | {("a100", k): shingles(v) for k, v in a100.items()}


def test_different_real_tasks_stay_below_threshold(shingled, capsys):
    # Exact Jaccard of every pair of different tasks among the H100 candidates (~25k pairs).
    keys = [k for k in shingled if k[0] == "h100"]
    worst = max((jaccard(shingled[x], shingled[y]), x[1], y[1]) for x, y in itertools.combinations(keys, 2))
    with capsys.disabled():
        print(f"\nmost similar pair of different tasks among {len(keys)} H100 candidates: {worst}")
    assert worst[0] < JACCARD_THRESHOLD


def test_lsh_finds_every_pair_the_exact_scan_finds(h100, a100, shingled):
    # Level 1 and 2 candidates of both GPUs, every H100 x A100 pair compared exactly (~30k pairs).
    hk, ak = [k for k in h100 if k[0] < 3], [k for k in a100 if k[0] < 3]
    items = ([CodeItem(f"h100:{k}", f"t{k}", h100[k]) for k in hk]
             + [CodeItem(f"a100:{k}", f"u{k}", a100[k]) for k in ak])
    split_of = {it.task_id: (Split.TRAIN if it.task_id[0] == "t" else Split.TEST_HELDOUT) for it in items}
    single = near_duplicates(items, split_of)
    found = {f.key for f in single}
    exact = {f"t{k}|u{j}" for k in hk for j in ak if len(shingled[("h100", k)]) >= 26
             and jaccard(shingled[("h100", k)], shingled[("a100", j)]) >= JACCARD_THRESHOLD}
    assert found == exact and len(exact) >= 5
    # Tokenising in worker processes gives the same findings.
    assert near_duplicates(items, split_of, workers=2) == single


def test_clean_split_of_real_tasks_and_candidates_has_no_findings(tasks, manifest):
    code = []
    for gpu in ("h100", "a100", "l40", "h20", "3090"):
        code += [CodeItem(f"{gpu}:{k}", kernelbench_task_id(*k), v) for k, v in _custom_codes(gpu).items()]
    records = [(it.task_id, manifest.split_of()[it.task_id].value) for it in code]
    assert leakage_report(manifest, tasks, code, records) == []


def test_planted_moved_task_is_caught(manifest):
    victim = manifest.task_ids(Split.TEST_HELDOUT)[0]
    clean = [(t, manifest.split_of()[t].value) for t in manifest.split_of()]
    assert task_in_two_splits(manifest, clean) == []
    found = task_in_two_splits(manifest, clean + [(victim, "train")])
    assert [(f.check, f.key) for f in found] == [(LeakCheck.TASK_IN_TWO_SPLITS, victim)]
    doubled = dataclasses.replace(manifest, rows=manifest.rows + (
        dataclasses.replace(next(r for r in manifest.rows if r.task_id == victim), split=Split.TRAIN),))
    assert [f.key for f in task_in_two_splits(doubled)] == [victim]
    assert [f.key for f in task_in_two_splits(manifest, [("never_assigned", "train")])] == ["never_assigned"]


def test_planted_renamed_near_duplicate_across_splits_is_caught(manifest, h100):
    held = kernelbench_task_id(1, 89)  # cumsum: scan is held out
    train = next(t for t in manifest.task_ids(Split.TRAIN) if t.startswith("kernelbench_L1"))
    assert manifest.split_of()[held] == Split.TEST_HELDOUT
    leaked = h100[(1, 89)]
    # Every snake_case name defined in the source (def, class, assignment, parameter) renamed.
    defined = set(re.findall(r"(?:def|class)\s+(\w+)|(\w+)\s*=[^=]", leaked))
    names = sorted({n for pair in defined for n in pair if "_" in n and not n.startswith("__")})
    assert len(names) >= 5
    leaked = _rename(leaked, names)
    code = [CodeItem(f"h100:{k}", kernelbench_task_id(*k), v) for k, v in h100.items()]
    code.append(CodeItem("attempt-planted", train, leaked))
    found, stats = near_duplicate_scan(code, manifest.split_of())
    assert [f.key for f in found] == ["|".join(sorted((held, train)))]
    assert stats.sources == len(code) and 0 < stats.candidate_pairs < len(code) ** 2 / 100
    assert "attempt-planted" in found[0].detail and "test_heldout" in found[0].detail


def test_planted_shape_variant_of_held_out_task_is_caught(tasks):
    softmax = TaskRef("softmax_rows_fp32", Family.SOFTMAX, "kerneltraj/softmax", Source.KERNELTRAJ,
                      "import torch\ndef run(x):\n    return torch.softmax(x, dim=-1)\n")
    imported = TaskRef("imported_softmax_4096x4096", Family.SOFTMAX, "imported/softmax", Source.KERNELTRAJ,
                       "import torch\n\n\ndef run(inp):\n    # 4096 x 4096 rows\n"
                       "    return torch.softmax(inp, dim=-1)\n")
    policy = SplitPolicy("v1", ("attention", "scan"), ("kerneltraj/softmax",))
    pool = [t for t in tasks if t.task_id not in (softmax.task_id, imported.task_id)] + [softmax, imported]
    m = build_manifest(policy, pool)
    assert shape_variants_across_splits(m, pool) == []
    # An older tool assigned the import on its own (by task id only) and put it in train.
    planted = dataclasses.replace(m, rows=tuple(dataclasses.replace(r, split=Split.TRAIN)
                                                if r.task_id == imported.task_id else r for r in m.rows))
    found = shape_variants_across_splits(planted, pool)
    assert len(found) == 1 and found[0].check == LeakCheck.SHAPE_VARIANT_ACROSS_SPLITS
    assert "imported_softmax_4096x4096" in found[0].detail and "softmax_rows_fp32" in found[0].detail
    # The same plant with the manifest's stored key forged still shows up: keys are recomputed.
    forged = dataclasses.replace(planted, rows=tuple(dataclasses.replace(r, workload_key="forged")
                                                     if r.task_id == imported.task_id else r for r in planted.rows))
    assert len(shape_variants_across_splits(forged, pool)) == 1


def test_planted_lineage_and_family_leaks_are_caught(manifest):
    pol = dataclasses.replace(manifest.policy, exclusive_lineages=("flashinfer-bench/gemm",))
    m = dataclasses.replace(manifest, policy=pol)
    assert lineage_across_splits(m) == []  # 17 gemm shapes are one workload: one split
    gemm = sorted(r.task_id for r in m.rows if r.lineage == "flashinfer-bench/gemm")
    moved = {"rotary_fp32", kernelbench_task_id(1, 90), gemm[0]}  # held-out lineage, held-out family, exclusive
    planted = dataclasses.replace(m, rows=tuple(
        dataclasses.replace(r, split=Split.VALIDATION if r.split == Split.TRAIN else Split.TRAIN)
        if r.task_id in moved else r for r in m.rows))
    got = {(f.check, f.key) for f in lineage_across_splits(planted)}
    assert got == {(LeakCheck.HELD_OUT_FAMILY_OUTSIDE_TEST, "scan"),
                   (LeakCheck.LINEAGE_ACROSS_SPLITS, "flashinfer-bench/gemm"),
                   (LeakCheck.LINEAGE_ACROSS_SPLITS, "kerneltraj/rotary")}
