"""Held-out-family splits: a versioned policy, a deterministic assignment and frozen manifests.

Every task lands in exactly one of train / validation / test_heldout:
- test_heldout: its family is held out, its lineage is held out, or it is a shape variant
  (same workload key, see `pipelines.curation.families.workload_key`) of a task that is;
- otherwise validation when hash(salt, workload key) falls below `validation_fraction`, else train.
Shape variants of one workload (KernelBench's six square/rectangular matmuls, FlashInfer's
rmsnorm_h128 ... rmsnorm_h7168, our fp32/fp16 twins) hash to the same bucket, so they are split
as one task and never by size. The rule depends only on the policy and the task's own content,
so a task appended later is assigned exactly as it would have been at the first release.

A manifest is frozen per policy version (`split_manifest-<version>.json`, with a content hash).
`check_frozen` refuses a rebuild that would move, re-family or re-lineage an existing task, or
that changes the policy, under the same version: a changed policy needs a new version.
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from pipelines.curation.families import Family, TaskRef, canonical_family

MANIFEST_SCHEMA = 1
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Split(str, enum.Enum):
    """The three splits a task can be in."""

    TRAIN = "train"
    VALIDATION = "validation"
    TEST_HELDOUT = "test_heldout"


class FrozenSplitError(ValueError):
    """A rebuild disagrees with the frozen manifest of the same version."""


@dataclass(frozen=True)
class SplitPolicy:
    """What is held out and how in-distribution tasks are divided; frozen under `version`."""

    version: str
    """Manifest version, e.g. `v1`; a changed policy must use a new one."""
    held_out_families: tuple[str, ...]
    """Families (shared vocabulary) whose every task goes to test_heldout."""
    held_out_lineages: tuple[str, ...] = ()
    """Source lineages whose every task goes to test_heldout, e.g. `kerneltraj/rotary`."""
    validation_fraction: float = 0.15
    """Share of in-distribution workloads sent to validation (by hash, so approximate)."""
    salt: str = "kerneltraj-splits"
    """Mixed into the assignment hash; a new salt reshuffles train/validation."""
    exclusive_lineages: tuple[str, ...] = ()
    """Lineages that must sit whole in one split (checked by the leakage report)."""

    def __post_init__(self) -> None:
        if not _VERSION.match(self.version):
            raise ValueError(f"policy version {self.version!r} must match {_VERSION.pattern}")
        if not 0.0 <= self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must be in [0, 1), got {self.validation_fraction}")
        # Closed vocabulary: a typo ("atention") would otherwise hold out nothing, silently.
        fams = tuple(sorted({canonical_family(f).value for f in self.held_out_families}))
        object.__setattr__(self, "held_out_families", fams)
        for name in ("held_out_lineages", "exclusive_lineages"):
            object.__setattr__(self, name, tuple(sorted(set(getattr(self, name)))))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def policy_hash(self) -> str:
        """Content hash of the policy (everything that can change an assignment)."""
        return _sha(self.to_dict())


DEFAULT_POLICY = SplitPolicy(
    version="v1",
    # attention: the most valuable production workload, present in all three sources (our two
    #   cards, 27 FlashInfer gqa/mla/dsa definitions, KernelBench L3 attention blocks), so the
    #   held-out set tests transfer to kernels the training data never showed.
    # scan: a sequential dependency along the axis (cumsum, logcumsumexp, KernelBench L1 89-93)
    #   that no other training family needs; holding it out tests a new algorithmic structure.
    held_out_families=(Family.ATTENTION.value, Family.SCAN.value),
    # kerneltraj/rotary: a lineage hold-out, exercising the lineage mechanism on our own cards;
    #   rotary has no imported counterpart, so the whole workload is withheld.
    held_out_lineages=("kerneltraj/rotary",),
    validation_fraction=0.15,
    salt="kerneltraj-splits-v1",
)


@dataclass(frozen=True)
class ManifestRow:
    """One task's assignment."""

    task_id: str
    family: str
    """Family on the shared vocabulary."""
    lineage: str
    workload_key: str
    """Shape-variant group: tasks with the same key are one workload at different sizes."""
    split: Split


@dataclass(frozen=True)
class Manifest:
    """The split of every task under one policy version."""

    version: str
    policy: SplitPolicy
    policy_hash: str
    rows: tuple[ManifestRow, ...]
    """Sorted by task id, one row per task."""

    @property
    def content_hash(self) -> str:
        return _sha(_payload(self))

    def split_of(self) -> dict[str, Split]:
        return {r.task_id: r.split for r in self.rows}

    def task_ids(self, split: Split) -> list[str]:
        return [r.task_id for r in self.rows if r.split == split]


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _bucket(salt: str, key: str) -> float:
    """Uniform [0, 1) from a stable hash (never Python's salted `hash`)."""
    digest = hashlib.sha256(f"{salt}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def assign(policy: SplitPolicy, tasks: Iterable[TaskRef]) -> dict[str, tuple[str, Split]]:
    """task id -> (workload key, split) under the policy; duplicate task ids raise."""
    tasks = list(tasks)
    seen: set[str] = set()
    for t in tasks:
        if t.task_id in seen:
            raise ValueError(f"task id {t.task_id!r} appears twice in the task list")
        seen.add(t.task_id)
    keys = {t.task_id: t.workload_key for t in tasks}
    held_fam, held_lin = set(policy.held_out_families), set(policy.held_out_lineages)
    held_keys = {keys[t.task_id] for t in tasks if t.family.value in held_fam or t.lineage in held_lin}
    out = {}
    for t in tasks:
        k = keys[t.task_id]
        if k in held_keys:
            split = Split.TEST_HELDOUT
        elif _bucket(policy.salt, k) < policy.validation_fraction:
            split = Split.VALIDATION
        else:
            split = Split.TRAIN
        out[t.task_id] = (k, split)
    return out


def build_manifest(policy: SplitPolicy, tasks: Iterable[TaskRef]) -> Manifest:
    """Deterministic manifest: same policy and tasks give the same rows and content hash."""
    tasks = list(tasks)
    assigned = assign(policy, tasks)
    rows = tuple(sorted((ManifestRow(t.task_id, t.family.value, t.lineage, *assigned[t.task_id]) for t in tasks),
                        key=lambda r: r.task_id))
    return Manifest(policy.version, policy, policy.policy_hash, rows)


def _payload(m: Manifest) -> dict[str, Any]:
    return {"schema": MANIFEST_SCHEMA, "version": m.version, "policy": m.policy.to_dict(),
            "policy_hash": m.policy_hash,
            "rows": [{**dataclasses.asdict(r), "split": r.split.value} for r in m.rows]}


def manifest_path(directory: Path | str, version: str) -> Path:
    if not _VERSION.match(version):
        raise ValueError(f"version {version!r} must match {_VERSION.pattern}")
    return Path(directory) / f"split_manifest-{version}.json"


def freeze(manifest: Manifest, directory: Path | str) -> Path:
    """Write `split_manifest-<version>.json`. When that version is already frozen, the new
    manifest must agree with it (`check_frozen`); tasks it adds are appended, and tasks it no
    longer lists keep their frozen rows (a split assignment is history, never rewritten)."""
    path = manifest_path(directory, manifest.version)
    if path.exists():
        frozen = load_frozen(directory, manifest.version)
        check_frozen(manifest, frozen)
        merged = {r.task_id: r for r in frozen.rows} | {r.task_id: r for r in manifest.rows}
        manifest = dataclasses.replace(manifest, rows=tuple(merged[k] for k in sorted(merged)))
    payload = _payload(manifest)
    payload["content_hash"] = manifest.content_hash
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a manifest
    return path


def load_frozen(directory: Path | str, version: str) -> Manifest:
    """Read a frozen manifest; a content hash that does not match its rows raises."""
    path = manifest_path(directory, version)
    payload = json.loads(path.read_text())
    if payload.get("schema") != MANIFEST_SCHEMA:
        raise FrozenSplitError(f"{path}: unknown manifest schema {payload.get('schema')!r}")
    pol = payload["policy"]
    policy = SplitPolicy(**{k: tuple(v) if isinstance(v, list) else v for k, v in pol.items()})
    rows = tuple(ManifestRow(r["task_id"], r["family"], r["lineage"], r["workload_key"], Split(r["split"]))
                 for r in payload["rows"])
    m = Manifest(payload["version"], policy, payload["policy_hash"], rows)
    if m.content_hash != payload.get("content_hash") or policy.policy_hash != m.policy_hash:
        raise FrozenSplitError(f"{path}: content hash mismatch: the frozen manifest was edited by hand")
    if m.version != version:
        raise FrozenSplitError(f"{path} holds version {m.version!r}, not {version!r}")
    return m


def check_frozen(new: Manifest, frozen: Manifest) -> None:
    """Raise FrozenSplitError when `new` (same version) changes the policy or the split, family or
    lineage of a task already in `frozen`. New tasks are fine; a different version is a new
    release line and is not compared."""
    if new.version != frozen.version:
        return
    if new.policy_hash != frozen.policy_hash:
        diff = {k: (v, new.policy.to_dict()[k]) for k, v in frozen.policy.to_dict().items()
                if new.policy.to_dict()[k] != v}
        raise FrozenSplitError(
            f"split policy changed under frozen version {new.version!r} ({diff}); "
            f"a changed policy must use a new version")
    old = {r.task_id: r for r in frozen.rows}
    moved = [f"{r.task_id}: {old[r.task_id].split.value}->{r.split.value}" for r in new.rows
             if r.task_id in old and old[r.task_id].split != r.split]
    relabelled = [f"{r.task_id}: {old[r.task_id].family}/{old[r.task_id].lineage}->{r.family}/{r.lineage}"
                  for r in new.rows if r.task_id in old
                  and (old[r.task_id].family, old[r.task_id].lineage) != (r.family, r.lineage)]
    if moved or relabelled:
        raise FrozenSplitError(
            f"version {new.version!r} is frozen but this build would change existing tasks "
            f"(moved: {moved[:20]}{' ...' if len(moved) > 20 else ''}; relabelled: {relabelled[:20]}); "
            f"a task keeps its split for the life of a version: use a new version")
