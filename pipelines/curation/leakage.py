"""Leakage checks between splits. Each check returns a list of `Finding`s; empty means clean.

(a) task_in_two_splits: a task with two manifest rows, or records (published rows, attempts)
    whose split label disagrees with the manifest or with each other.
(b) near_duplicate_code: candidate sources of tasks in different splits whose normalised token
    shingles overlap with Jaccard >= 0.8 (comments/docstrings stripped, identifiers renamed by
    order of appearance, numbers and short strings normalised, CUDA inside strings tokenised;
    5-token shingles; 128-permutation MinHash; LSH with 32 bands x 4 rows proposes pairs, the
    exact Jaccard of the shingle sets decides). One finding per pair of tasks.
(c) lineage_across_splits / held_out_family_outside_test: a held-out (or exclusive) lineage, or a
    held-out family, with tasks outside its one split.
(d) shape_variant_across_splits: tasks with one workload key (same normalised reference and
    family, i.e. the same workload at other sizes) in different splits.
"""
from __future__ import annotations

import enum
import hashlib
import multiprocessing
import time
import zlib
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

from pipelines.curation.families import TaskRef, canonical_tokens
from pipelines.curation.split_policy import Manifest, Split

JACCARD_THRESHOLD = 0.8
"""Two sources at or above this shingle Jaccard are near-duplicates. Measured on CUDA-L1's 437
real H100 + A100 candidates: the most similar pair of different tasks scores 0.64; the same
task's candidates on the two GPUs range from 0.0 (rewritten) to 1.0, and 11 pairs whose texts
differ score 0.81-1.0 (edited copies)."""
SHINGLE_TOKENS = 5
NUM_PERM = 128
BANDS, ROWS = 32, 4
"""LSH banding: a pair at Jaccard 0.8 becomes a candidate with probability 1-(1-0.8^4)^32 > 0.9999."""
MIN_TOKENS = 30
"""Sources shorter than this (stubs such as the text `None`) say nothing about copying; skipped."""
_PRIME = (1 << 31) - 1
_PERM_SEED = 20250601


class LeakCheck(str, enum.Enum):
    """Closed set of leakage checks."""

    TASK_IN_TWO_SPLITS = "task_in_two_splits"
    NEAR_DUPLICATE_CODE = "near_duplicate_code"
    LINEAGE_ACROSS_SPLITS = "lineage_across_splits"
    HELD_OUT_FAMILY_OUTSIDE_TEST = "held_out_family_outside_test"
    SHAPE_VARIANT_ACROSS_SPLITS = "shape_variant_across_splits"


@dataclass(frozen=True)
class Finding:
    """One leak."""

    check: LeakCheck
    key: str
    """What leaks: a task id, a `task|task` pair, a lineage, a family or a workload key."""
    detail: str
    """Human-readable evidence (splits involved, similarity, example attempt ids)."""


@dataclass(frozen=True)
class CodeItem:
    """One candidate source to compare across splits."""

    key: str
    """Attempt id (or any unique key)."""
    task_id: str
    source: str


# ---- (a) ------------------------------------------------------------------------------------

def task_in_two_splits(manifest: Manifest, records: Iterable[tuple[str, str]] = ()) -> list[Finding]:
    """Tasks with more than one split: across manifest rows, or in `records` of (task_id, split)
    (e.g. the split column of published rows) against the manifest."""
    seen: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in manifest.rows:
        seen[r.task_id][f"manifest:{r.split.value}"] += 1
    assigned = manifest.split_of()
    for task_id, split in records:
        split = Split(split).value
        seen[task_id][f"records:{split}"] += 1
    out = []
    for task_id, where in sorted(seen.items()):
        splits = {k.split(":", 1)[1] for k in where}
        dup_rows = sum(v for k, v in where.items() if k.startswith("manifest:")) > 1
        if task_id not in assigned and where:
            out.append(Finding(LeakCheck.TASK_IN_TWO_SPLITS, task_id,
                               f"records label it {sorted(splits)} but the manifest has no row for it"))
        elif len(splits) > 1 or dup_rows:
            out.append(Finding(LeakCheck.TASK_IN_TWO_SPLITS, task_id,
                               f"seen in {dict(sorted(where.items()))}; manifest says {assigned[task_id].value}"))
    return out


# ---- (b) ------------------------------------------------------------------------------------

def shingles(source: str, k: int = SHINGLE_TOKENS) -> np.ndarray:
    """Sorted unique 32-bit hashes of the k-token shingles of the canonical token stream."""
    toks = canonical_tokens(source)
    if len(toks) < k:
        return np.zeros(0, dtype=np.uint64)
    crc = {t: zlib.crc32(t.encode()) for t in set(toks)}
    ids = np.array([crc[t] for t in toks], dtype=np.uint64)
    n = len(ids) - k + 1
    h = np.zeros(n, dtype=np.uint64)
    for j in range(k):  # polynomial rolling hash; stays below 2**53, so no uint64 overflow
        h = (h * np.uint64(1_000_003) + ids[j:j + n]) & np.uint64(0xFFFFFFFF)
    return np.unique(h)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted unique shingle arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


def similarity(a: str, b: str) -> float:
    """Exact normalised-shingle Jaccard of two sources (what the threshold applies to)."""
    return jaccard(shingles(a), shingles(b))


class MinHasher:
    """128 universal hash permutations ((a*x + b) mod 2^31-1) with a fixed seed."""

    def __init__(self, num_perm: int = NUM_PERM, seed: int = _PERM_SEED):
        rng = np.random.default_rng(seed)
        self.a = rng.integers(1, _PRIME, num_perm, dtype=np.uint64)[:, None]
        self.b = rng.integers(0, _PRIME, num_perm, dtype=np.uint64)[:, None]

    def signature(self, sh: np.ndarray) -> np.ndarray:
        x = (sh % np.uint64(_PRIME))[None, :]
        return ((self.a * x + self.b) % np.uint64(_PRIME)).min(axis=1)


@dataclass(frozen=True)
class ScanStats:
    """What one near-duplicate scan did (for logs and asset metadata)."""

    sources: int
    """Items given."""
    distinct: int
    """Distinct normalised sources compared (stubs and unassigned tasks excluded)."""
    candidate_pairs: int
    """Pairs proposed by LSH (plus identical sources spanning splits)."""
    seconds: float


def near_duplicates(items: Sequence[CodeItem], split_of: Mapping[str, Split | str],
                    threshold: float = JACCARD_THRESHOLD, workers: int = 1) -> list[Finding]:
    """Near-duplicate sources whose tasks sit in different splits, one finding per task pair."""
    return near_duplicate_scan(items, split_of, threshold, workers)[0]


def _shingle_all(texts: list[str], workers: int) -> list[np.ndarray]:
    if workers <= 1 or len(texts) < 200:
        return [shingles(t) for t in texts]
    # Tokenising is pure Python and dominates the scan (~1-2 ms a source): spread it over
    # processes. Spawned, not forked, so a parent holding CUDA or Dagster threads is safe.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        return list(pool.map(shingles, texts, chunksize=max(1, len(texts) // (workers * 8))))


def near_duplicate_scan(items: Sequence[CodeItem], split_of: Mapping[str, Split | str],
                        threshold: float = JACCARD_THRESHOLD, workers: int = 1
                        ) -> tuple[list[Finding], ScanStats]:
    """`near_duplicates` plus scan statistics; `workers` > 1 tokenises in that many processes.

    Exact duplicates after normalisation are collapsed first, so a thousand copies of one
    solution cost one comparison; LSH bands propose the remaining pairs (no all-pairs scan)."""
    t0 = time.perf_counter()
    hasher = MinHasher()
    reps: dict[str, dict] = {}  # digest of the canonical shingle set -> members and signature
    n_items = len(items)
    items = [it for it in items if it.task_id in split_of]
    texts = list(dict.fromkeys(it.source for it in items))  # corpora repeat sources verbatim
    by_text = dict(zip(texts, _shingle_all(texts, workers)))
    for it in items:
        sh = by_text[it.source]
        if len(sh) < MIN_TOKENS - SHINGLE_TOKENS + 1:
            continue
        digest = hashlib.sha1(sh.tobytes()).hexdigest()
        rep = reps.get(digest)
        if rep is None:
            rep = reps[digest] = {"sh": sh, "sig": hasher.signature(sh), "members": []}
        rep["members"].append((it.key, it.task_id, Split(split_of[it.task_id])))
    digests = list(reps)
    pairs: set[tuple[int, int]] = set()
    for i in range(len(digests)):
        if len({m[2] for m in reps[digests[i]]["members"]}) > 1:
            pairs.add((i, i))  # identical normalised code already spans splits
    buckets: dict[bytes, list[int]] = defaultdict(list)
    for i, d in enumerate(digests):
        sig = reps[d]["sig"]
        for band in range(BANDS):
            buckets[bytes([band]) + sig[band * ROWS:(band + 1) * ROWS].tobytes()].append(i)
    for members in buckets.values():
        for x in range(len(members)):
            for y in range(x + 1, len(members)):
                pairs.add((members[x], members[y]))
    best: dict[tuple[str, str], tuple[float, str, str, str, str]] = {}
    for i, j in pairs:
        ri, rj = reps[digests[i]], reps[digests[j]]
        cross = [(a, b) for a in ri["members"] for b in rj["members"] if a[2] != b[2] and a[1] != b[1]]
        if not cross:
            continue
        sim = 1.0 if i == j else jaccard(ri["sh"], rj["sh"])
        if sim < threshold:
            continue
        for a, b in cross:
            a, b = sorted((a, b), key=lambda m: m[1])
            pair = (a[1], b[1])
            if pair not in best or sim > best[pair][0]:
                best[pair] = (sim, a[0], b[0], a[2].value, b[2].value)
    out = [Finding(LeakCheck.NEAR_DUPLICATE_CODE, f"{ta}|{tb}",
                   f"jaccard={sim:.3f} (threshold {threshold}) between {ka} ({ta}, {sa}) and {kb} ({tb}, {sb})")
           for (ta, tb), (sim, ka, kb, sa, sb) in sorted(best.items())]
    return out, ScanStats(n_items, len(reps), len(pairs), round(time.perf_counter() - t0, 3))


# ---- (c) ------------------------------------------------------------------------------------

def lineage_across_splits(manifest: Manifest) -> list[Finding]:
    """Held-out lineages and families with a task outside test_heldout; exclusive lineages
    spread over more than one split."""
    pol = manifest.policy
    by_lineage: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    by_family: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in manifest.rows:
        by_lineage[r.lineage][r.split.value].append(r.task_id)
        by_family[r.family][r.split.value].append(r.task_id)
    out = []
    for lin in sorted(set(pol.held_out_lineages) | set(pol.exclusive_lineages)):
        splits = by_lineage.get(lin, {})
        bad = (set(splits) - {Split.TEST_HELDOUT.value}) if lin in pol.held_out_lineages else (
            set(splits) if len(splits) > 1 else set())
        if bad:
            out.append(Finding(LeakCheck.LINEAGE_ACROSS_SPLITS, lin,
                               f"{'held-out' if lin in pol.held_out_lineages else 'exclusive'} lineage spans "
                               f"{ {s: sorted(v)[:10] for s, v in sorted(splits.items())} }"))
    for fam in pol.held_out_families:
        splits = by_family.get(fam, {})
        outside = {s: sorted(v)[:10] for s, v in sorted(splits.items()) if s != Split.TEST_HELDOUT.value}
        if outside:
            out.append(Finding(LeakCheck.HELD_OUT_FAMILY_OUTSIDE_TEST, fam,
                               f"held-out family has tasks outside test_heldout: {outside}"))
    return out


# ---- (d) ------------------------------------------------------------------------------------

def shape_variants_across_splits(manifest: Manifest, tasks: Iterable[TaskRef] | None = None) -> list[Finding]:
    """Tasks sharing a workload key (one workload at different sizes) in different splits. With
    `tasks`, keys are recomputed from their references rather than trusted from the manifest."""
    keys = {t.task_id: t.workload_key for t in tasks} if tasks is not None else {}
    groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in manifest.rows:
        groups[keys.get(r.task_id, r.workload_key)][r.split.value].append(r.task_id)
    return [Finding(LeakCheck.SHAPE_VARIANT_ACROSS_SPLITS, key,
                    f"one workload in several splits: { {s: sorted(v) for s, v in sorted(splits.items())} }")
            for key, splits in sorted(groups.items()) if len(splits) > 1]


def leakage_report(manifest: Manifest, tasks: Iterable[TaskRef] | None = None,
                   code: Sequence[CodeItem] = (), records: Iterable[tuple[str, str]] = (),
                   workers: int = 1) -> list[Finding]:
    """All checks; an empty list is a clean release."""
    split_of = manifest.split_of()
    return (task_in_two_splits(manifest, records) + near_duplicates(code, split_of, workers=workers)
            + lineage_across_splits(manifest) + shape_variants_across_splits(manifest, tasks))
