"""Held-out-family splits: families of real tasks, deterministic assignment, frozen manifests."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections import defaultdict

import pytest

from pipelines.curation.families import (Family, Source, TaskRef, all_tasks, canonical_family, catalogue_tasks,
                                         classify_flashinfer, classify_kernelbench, kernelbench_task_id)
from pipelines.curation.split_policy import (DEFAULT_POLICY, FrozenSplitError, Split, SplitPolicy, build_manifest,
                                             check_frozen, freeze, load_frozen, manifest_path)
from tests.conftest import REPO_ROOT

DATA = REPO_ROOT / ".." / "shared" / "data"


@pytest.fixture(scope="module")
def tasks() -> list[TaskRef]:
    return all_tasks(DATA)


@pytest.fixture(scope="module")
def kb_refs() -> dict[tuple[int, int], str]:
    refs = {}
    for line in (DATA / "cuda-l1" / "h100.jsonl").read_text().splitlines():
        r = json.loads(line)
        refs[(int(r["level_id"]), int(r["task_id"]))] = r["ref_code"]
    return refs


# ---- families -------------------------------------------------------------------------------

# Families read off KernelBench's own task names (level, id, name) -> the family they must get.
KB_NAMED = [
    (1, 1, "Square_matrix_multiplication_", Family.GEMM), (1, 3, "Batched_matrix_multiplication", Family.GEMM),
    (1, 19, "ReLU", Family.ACTIVATION), (1, 23, "Softmax", Family.SOFTMAX), (1, 24, "LogSoftmax", Family.SOFTMAX),
    (1, 33, "BatchNorm", Family.NORM), (1, 36, "RMSNorm_", Family.NORM), (1, 38, "L1Norm_", Family.NORM),
    (1, 42, "Max_Pooling_2D", Family.POOLING), (1, 47, "Sum_reduction_over_a_dimension", Family.REDUCTION),
    (1, 51, "Argmax_over_a_dimension", Family.TOPK), (1, 55, "conv_standard_2D", Family.CONV),
    (1, 89, "cumsum", Family.SCAN), (1, 94, "MSELoss", Family.LOSS), (1, 95, "CrossEntropyLoss", Family.CROSS_ENTROPY),
    (2, 1, "Conv2D_ReLU_BiasAdd", Family.CONV), (2, 9, "Matmul_Subtract_Multiply_ReLU", Family.GEMM),
    (3, 1, "MLP", Family.ARCHITECTURE), (3, 9, "ResNet18", Family.ARCHITECTURE), (3, 35, "LTSM", Family.ARCHITECTURE),
    (3, 31, "VisionAttention", Family.ATTENTION), (3, 43, "MinGPTCausalAttention", Family.ATTENTION),
    (3, 44, "MiniGPTBlock", Family.ATTENTION),
]


@pytest.mark.parametrize("level,tid,name,family", KB_NAMED, ids=[f"L{x[0]}_{x[1]}_{x[2]}" for x in KB_NAMED])
def test_kernelbench_family_matches_task_name(kb_refs, level, tid, name, family):
    assert classify_kernelbench(kb_refs[(level, tid)], level) == family


def test_kernelbench_level_3_is_architecture_unless_attention_and_rules_agree_without_level(kb_refs):
    by_level = defaultdict(set)
    for (level, tid), code in kb_refs.items():
        fam = classify_kernelbench(code, level)
        by_level[level].add(fam)
        if level < 3:
            # The level-free rules must reach the same family for single ops and fused chains.
            assert classify_kernelbench(code) == fam, (level, tid)
    assert by_level[3] == {Family.ARCHITECTURE, Family.ATTENTION}
    assert Family.ARCHITECTURE not in by_level[1] | by_level[2]
    assert by_level[2] == {Family.CONV, Family.GEMM}  # every L2 chain is built around a conv or a GEMM


def test_flashinfer_op_types_map_onto_shared_vocabulary():
    expect = {"gemm": Family.GEMM, "rmsnorm": Family.NORM, "gqa_paged": Family.ATTENTION,
              "gqa_ragged": Family.ATTENTION, "mla_paged": Family.ATTENTION, "dsa_paged": Family.ATTENTION,
              "gdn": Family.LINEAR_ATTENTION, "moe": Family.MOE, "sampling": Family.SAMPLING}
    seen = set()
    for path in sorted((DATA / "flashinfer-trace" / "definitions").glob("*/*.json")):
        d = json.loads(path.read_text())
        assert classify_flashinfer(d) == expect[d["op_type"]], path.name
        seen.add(d["op_type"])
    assert seen == set(expect)
    with pytest.raises(ValueError, match="unknown family"):
        classify_flashinfer({"name": "x", "op_type": "warp_specialised_thing"})


def test_every_task_of_every_source_has_family_and_lineage(tasks):
    by_source = defaultdict(list)
    for t in tasks:
        assert isinstance(t.family, Family) and t.lineage and t.reference
        by_source[t.source].append(t)
    assert len(by_source[Source.KERNELBENCH]) == 250 and len(by_source[Source.FLASHINFER]) == 79
    assert {t.lineage for t in by_source[Source.KERNELBENCH]} == {"kernelbench/L1", "kernelbench/L2", "kernelbench/L3"}
    ops = {p.name for p in (DATA / "flashinfer-trace" / "definitions").iterdir() if p.is_dir()}
    assert {t.lineage for t in by_source[Source.FLASHINFER]} == {f"flashinfer-bench/{op}" for op in ops}
    assert len(by_source[Source.KERNELTRAJ]) >= 1
    # Holding out attention reaches all three sources (our cards only once they are written).
    attention_sources = {t.source for t in tasks if t.family == Family.ATTENTION}
    assert {Source.KERNELBENCH, Source.FLASHINFER} <= attention_sources


def test_workload_key_groups_shape_variants_not_different_ops(tasks):
    by_id = {t.task_id: t for t in tasks}
    square, rect = by_id[kernelbench_task_id(1, 1)], by_id[kernelbench_task_id(1, 2)]  # N=2048 vs M,K,N
    assert square.workload_key == rect.workload_key
    fi = [t for t in tasks if t.task_id.startswith("flashinfer_rmsnorm_h")]
    assert len(fi) == 8 and len({t.workload_key for t in fi}) == 1
    relu, leaky = by_id[kernelbench_task_id(1, 19)], by_id[kernelbench_task_id(1, 20)]
    assert relu.workload_key != leaky.workload_key
    # Same code, other family: not the same workload.
    assert TaskRef("a", Family.GEMM, "x", Source.KERNELTRAJ, "def run(a):\n    return a\n").workload_key != \
        TaskRef("b", Family.NORM, "x", Source.KERNELTRAJ, "def run(a):\n    return a\n").workload_key


# ---- assignment -----------------------------------------------------------------------------

def test_assignment_is_deterministic_and_independent_of_process_hash_seed(tasks):
    a, b = build_manifest(DEFAULT_POLICY, tasks), build_manifest(DEFAULT_POLICY, list(reversed(tasks)))
    assert a.rows == b.rows and a.content_hash == b.content_hash
    code = ("from pathlib import Path; from pipelines.curation.families import all_tasks; "
            "from pipelines.curation.split_policy import DEFAULT_POLICY, build_manifest; "
            f"print(build_manifest(DEFAULT_POLICY, all_tasks(Path({str(DATA)!r}))).content_hash)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == a.content_hash


def test_held_out_families_and_lineages_go_to_test_and_the_rest_splits_by_fraction(tasks):
    m = build_manifest(DEFAULT_POLICY, tasks)
    assert len(DEFAULT_POLICY.held_out_families) >= 2
    for r in m.rows:
        held = r.family in DEFAULT_POLICY.held_out_families or r.lineage in DEFAULT_POLICY.held_out_lineages
        assert (r.split == Split.TEST_HELDOUT) == held, r
    groups = {r.workload_key for r in m.rows if r.split != Split.TEST_HELDOUT}
    val = {r.workload_key for r in m.rows if r.split == Split.VALIDATION}
    share = len(val) / len(groups)
    assert 0.08 < share < 0.25, share  # ~260 workloads at 0.15: outside this is a broken hash


def test_shape_variants_share_a_split(tasks):
    m = build_manifest(SplitPolicy("vx", ("attention",), validation_fraction=0.5, salt="s"), tasks)
    by_key = defaultdict(set)
    for r in m.rows:
        by_key[r.workload_key].add(r.split)
    assert all(len(s) == 1 for s in by_key.values())
    assert any(len([r for r in m.rows if r.workload_key == k]) >= 8 for k in by_key)  # FlashInfer gemm/rmsnorm


def test_lineage_hold_out_pulls_in_shape_variants_of_other_lineages():
    ours = TaskRef("softmax_rows_fp32", Family.SOFTMAX, "kerneltraj/softmax", Source.KERNELTRAJ,
                   "import torch\ndef run(x):\n    return torch.softmax(x, dim=-1)\n")
    imported = TaskRef("imported_softmax_4096x4096", Family.SOFTMAX, "imported/softmax", Source.KERNELTRAJ,
                       "import torch\n\ndef run(inp):  # rows of a 4096x4096 matrix\n"
                       "    return torch.softmax(inp, dim=-1)\n")
    m = build_manifest(SplitPolicy("v1", ("scan",), ("kerneltraj/softmax",), validation_fraction=0.0), [ours, imported])
    assert m.split_of() == {"softmax_rows_fp32": Split.TEST_HELDOUT, "imported_softmax_4096x4096": Split.TEST_HELDOUT}


def test_policy_rejects_unknown_family_and_bad_version():
    with pytest.raises(ValueError, match="unknown family"):
        SplitPolicy("v1", ("atention",))
    with pytest.raises(ValueError, match="version"):
        SplitPolicy("../v1", ("attention",))
    assert canonical_family("rmsnorm") == Family.NORM and canonical_family("gqa_paged") == Family.ATTENTION


# ---- frozen manifests -----------------------------------------------------------------------

def test_frozen_manifest_survives_two_builds(tasks, tmp_path):
    path = freeze(build_manifest(DEFAULT_POLICY, tasks), tmp_path)
    assert path == manifest_path(tmp_path, "v1") and path.name == "split_manifest-v1.json"
    first = path.read_bytes()
    again = build_manifest(DEFAULT_POLICY, all_tasks(DATA))  # a second, independent build
    check_frozen(again, load_frozen(tmp_path, "v1"))
    freeze(again, tmp_path)
    assert path.read_bytes() == first
    assert load_frozen(tmp_path, "v1").content_hash == again.content_hash


def test_changing_the_policy_under_the_same_version_raises(tasks, tmp_path):
    freeze(build_manifest(DEFAULT_POLICY, tasks), tmp_path)
    changed = dataclasses.replace(DEFAULT_POLICY, held_out_families=("attention", "scan", "topk"))
    with pytest.raises(FrozenSplitError, match="policy changed under frozen version 'v1'.*new version"):
        freeze(build_manifest(changed, tasks), tmp_path)
    reshuffled = dataclasses.replace(DEFAULT_POLICY, salt="other")
    with pytest.raises(FrozenSplitError, match="policy changed"):
        check_frozen(build_manifest(reshuffled, tasks), load_frozen(tmp_path, "v1"))


def test_new_version_is_allowed_and_leaves_the_old_one_alone(tasks, tmp_path):
    p1 = freeze(build_manifest(DEFAULT_POLICY, tasks), tmp_path)
    before = p1.read_bytes()
    v2 = dataclasses.replace(DEFAULT_POLICY, version="v2", held_out_families=("attention", "scan", "topk"))
    m2 = build_manifest(v2, tasks)
    check_frozen(m2, load_frozen(tmp_path, "v1"))  # different version: not compared
    p2 = freeze(m2, tmp_path)
    assert p2.name == "split_manifest-v2.json" and p1.read_bytes() == before
    assert (load_frozen(tmp_path, "v2").task_ids(Split.TEST_HELDOUT)
            != load_frozen(tmp_path, "v1").task_ids(Split.TEST_HELDOUT))


def test_planted_moved_task_is_caught(tasks, tmp_path):
    m = build_manifest(DEFAULT_POLICY, tasks)
    freeze(m, tmp_path)
    victim = next(r for r in m.rows if r.split == Split.TRAIN)
    planted = dataclasses.replace(m, rows=tuple(dataclasses.replace(r, split=Split.VALIDATION) if r is victim else r
                                                for r in m.rows))
    with pytest.raises(FrozenSplitError, match=f"{victim.task_id}: train->validation"):
        check_frozen(planted, load_frozen(tmp_path, "v1"))
    # Editing the frozen file by hand is caught by its content hash.
    path = manifest_path(tmp_path, "v1")
    payload = json.loads(path.read_text())
    row = next(r for r in payload["rows"] if r["task_id"] == victim.task_id)
    row["split"] = "test_heldout"
    path.write_text(json.dumps(payload))
    with pytest.raises(FrozenSplitError, match="content hash mismatch"):
        load_frozen(tmp_path, "v1")


def test_appended_tasks_are_assigned_by_the_same_rule(tasks, tmp_path):
    early = [t for t in tasks if t.source != Source.FLASHINFER]
    freeze(build_manifest(DEFAULT_POLICY, early), tmp_path)
    later = build_manifest(DEFAULT_POLICY, tasks)
    freeze(later, tmp_path)  # appending FlashInfer to the frozen v1 is allowed
    frozen = load_frozen(tmp_path, "v1")
    assert frozen.split_of() == later.split_of() and len(frozen.rows) == len(tasks)
    # A task the new build no longer lists keeps its frozen row.
    freeze(build_manifest(DEFAULT_POLICY, early), tmp_path)
    assert len(load_frozen(tmp_path, "v1").rows) == len(tasks)


def test_appending_a_held_out_variant_of_a_train_task_is_refused(tmp_path):
    ref = "import torch\ndef run(x):\n    return torch.cumsum(x, dim=-1)\n"
    a = TaskRef("cumsum_a", Family.SCAN, "lab/a", Source.KERNELTRAJ, ref)
    pol = SplitPolicy("v1", ("attention", "topk"), ("lab/b",), validation_fraction=0.0)
    freeze(build_manifest(pol, [a]), tmp_path)
    b = TaskRef("cumsum_b", Family.SCAN, "lab/b", Source.KERNELTRAJ, ref.replace("x", "y"))
    # b's lineage is held out, and it is a's workload: a would have to move, which v1 forbids.
    with pytest.raises(FrozenSplitError, match="cumsum_a: train->test_heldout"):
        freeze(build_manifest(pol, [a, b]), tmp_path)


def test_catalogue_tasks_keep_their_declared_family_and_lineage():
    from grader.catalogue import load_catalogue
    cards = load_catalogue()
    refs = {t.task_id: t for t in catalogue_tasks()}
    assert set(refs) == set(cards)
    for tid, card in cards.items():
        assert refs[tid].family == canonical_family(card.family) and refs[tid].lineage == card.lineage
