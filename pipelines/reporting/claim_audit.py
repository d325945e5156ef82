"""Claim audit: what an imported corpus claims about each attempt, against our primary grade of it.

Like with like. A claim is a speedup against one baseline on one GPU. Our grade's speedup is
against the task card's expert, timed in the same run on the grading device. For KernelBench
tasks (which is what CUDA-L1 rows become, see `pipelines.importers.kernelbench.task_card`) the
expert *is* the task's PyTorch reference run eagerly, so our speedup and CUDA-L1's
`score_default` (against eager PyTorch) measure the same ratio. Only those claims are
`comparable` (baseline `default` on a card whose lineage is `kernelbench/...`). CUDA-L1's other
baselines (torch.compile, CUDA graphs, cuDNN) are not timed by our grader: they are audited as
`ambiguous / baseline_differs`, counted, never compared. We compare against the *unclipped*
measured ratio (median expert ms / median candidate ms per size, geometric mean over sizes with
the interval of `grader.labels.log2_interval`), not `speedup_geomean`: the reward clips per-size
speedups at 8x, and a clipped 8x must not refute an honest 12x claim.

Classes (closed), decided per claim:
- `reproduced`: our whole ~95% interval of log2(measured) lies at or above log2(claim) - TIE_BAND_LOG2.
- `refuted`: the whole interval lies below log2(claim) - band; or the kernel is floored
  (wrong_output, cheat_flagged; and, on the claim's own GPU, compile/runtime errors, timeouts,
  crashes), with the grade's status kept beside it.
- `ambiguous`: the interval straddles the band edge; the grading GPU is not the claim's GPU (a
  claim for an H100 graded on an H200 is another target: labelled `gpu_differs`, never silently
  compared); the baseline is not ours; the claim states no speedup.
- `not_graded`: no primary grade to hold it against (attempt quarantined at import, not graded
  yet, `unsupported_on_backend`, `infra_error`). Counted in every total, never dropped.
Wrong or cheating output refutes a claim whatever the GPU: correctness does not depend on the
GPU model. A compile or runtime failure on another GPU (or on CPU) may, so it stays ambiguous.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
import types
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Iterable

import duckdb

from grader.contract import SizeResult
from grader.labels import TIE_BAND_LOG2, log2_interval
from pipelines.reporting.status_sections import StatusContext
from pipelines.core.warehouse import insert_rows, load_sql, query_dicts, run_script

CLAIMS_FILE = "claims.jsonl"
"""Name `kerneltraj import` gives the claims it keeps beside each imported attempts file."""
COMPARABLE_BASELINES = {("cuda-l1", "default")}
"""(format, baseline) pairs whose baseline is eager PyTorch, i.e. our KernelBench expert."""
BUCKETS = ((1.1, "<1.1x"), (2.0, "1.1-2x"), (10.0, "2-10x"), (math.inf, ">=10x"))
"""Claim-size buckets: (upper bound, exclusive; label)."""
FLOOR_ANY_GPU = {"wrong_output", "cheat_flagged"}
FLOOR_SAME_GPU = {"compile_error", "runtime_error", "timeout", "crashed"}
_GENERIC_GPU_WORDS = {"nvidia", "geforce", "rtx", "tesla", "gpu"}
_SIZE_FIELDS = {f.name for f in dataclasses.fields(SizeResult)} - {"speedup"}


class AuditClass(str, Enum):
    REPRODUCED = "reproduced"
    REFUTED = "refuted"
    AMBIGUOUS = "ambiguous"
    NOT_GRADED = "not_graded"


class AuditReason(str, Enum):
    MATCHED = "matched"
    """Our interval lies within the tie band of the claim."""
    FASTER_THAN_CLAIMED = "faster_than_claimed"
    SLOWER_THAN_CLAIMED = "slower_than_claimed"
    FLOORED = "floored"
    """The kernel is wrong, cheating or broken (the grade's status says which)."""
    CI_STRADDLES = "ci_straddles"
    GPU_DIFFERS = "gpu_differs"
    GPU_UNKNOWN = "gpu_unknown"
    BASELINE_DIFFERS = "baseline_differs"
    NO_SPEEDUP_FIGURE = "no_speedup_figure"
    CORRECTNESS_CONFIRMED = "correctness_confirmed"
    NOT_TIMED = "not_timed"
    NOT_ADMITTED = "not_admitted"
    NO_GRADE = "no_grade"
    UNSUPPORTED_ON_BACKEND = "unsupported_on_backend"
    INFRA_ERROR = "infra_error"


@dataclass(frozen=True)
class Verdict:
    """The audit of one claim."""

    audit_class: AuditClass
    """Closed class: reproduced, refuted, ambiguous, not_graded."""
    reason: AuditReason
    """Why that class (closed)."""
    same_gpu: bool | None
    """Grading device is the claim's GPU (None: no grade, or the claim names no GPU)."""
    measured_speedup: float | None
    """Our unclipped geometric-mean speedup vs the expert (None: not timed)."""
    log2_low: float | None
    """Low end of our ~95% interval of log2(measured_speedup)."""
    log2_high: float | None
    """High end of that interval."""


def bucket(claimed: float | None) -> str | None:
    """Claim-size bucket label of a claimed speedup."""
    if claimed is None:
        return None
    return next(label for top, label in BUCKETS if claimed < top)


def same_gpu(claim_gpu: str | None, device: str | None) -> bool | None:
    """Whether `device` (the grade's GPU name) is the GPU a claim names, by whole model tokens.

    `h20` is not `NVIDIA H200` and `l40` is not `NVIDIA L40S`: substrings would say they are."""
    if not claim_gpu or not device:
        return None
    want = set(re.findall(r"[a-z0-9]+", claim_gpu.lower())) - _GENERIC_GPU_WORDS
    have = set(re.findall(r"[a-z0-9]+", device.lower()))
    return bool(want) and want <= have


def measured_interval(sizes_json: str | None) -> tuple[float, float, float] | None:
    """(centre, low, high) of log2 of our unclipped speedup from a grade's stored sizes; None if untimed."""
    sizes = []
    for d in json.loads(sizes_json or "[]"):
        c, e = d.get("cand_ms"), d.get("expert_ms")
        if c and e and c > 0 and e > 0:
            sizes.append(SizeResult(**{k: v for k, v in d.items() if k in _SIZE_FIELDS}, speedup=e / c))
    # log2_interval reads only `.sizes`: the same interval formula as the speed labels.
    return log2_interval(types.SimpleNamespace(sizes=sizes)) if sizes else None


def classify(claim: dict[str, Any], band: float = TIE_BAND_LOG2) -> Verdict:
    """Audit one row of `claims.claims_with_grades`."""
    status = claim.get("status")
    if status is None:
        reason = AuditReason.NO_GRADE if claim.get("in_warehouse") else AuditReason.NOT_ADMITTED
        return Verdict(AuditClass.NOT_GRADED, reason, None, None, None, None)
    if status in ("unsupported_on_backend", "infra_error"):
        return Verdict(AuditClass.NOT_GRADED, AuditReason(status), None, None, None, None)
    if claim.get("claimed_speedup") is None and claim.get("claimed_correct") is not True:
        # The source claims no speed and no working kernel (a failed eval): nothing to confirm or refute.
        return Verdict(AuditClass.AMBIGUOUS, AuditReason.NO_SPEEDUP_FIGURE,
                       same_gpu(claim.get("gpu"), claim.get("device")), None, None, None)
    gpu_ok = same_gpu(claim.get("gpu"), claim.get("device"))
    iv = measured_interval(claim.get("sizes"))
    m = (2 ** iv[0], iv[1], iv[2]) if iv else (None, None, None)

    def verdict(c: AuditClass, r: AuditReason) -> Verdict:
        return Verdict(c, r, gpu_ok, *m)

    if status in FLOOR_ANY_GPU or (status in FLOOR_SAME_GPU and gpu_ok):
        return verdict(AuditClass.REFUTED, AuditReason.FLOORED)
    if status != "correct":
        return verdict(AuditClass.AMBIGUOUS, AuditReason.GPU_DIFFERS if gpu_ok is False else AuditReason.GPU_UNKNOWN)
    if not is_comparable(claim):
        return verdict(AuditClass.AMBIGUOUS, AuditReason.BASELINE_DIFFERS)
    claimed = claim.get("claimed_speedup")
    if claimed is None or claimed <= 0:
        if claim.get("claimed_correct"):
            return verdict(AuditClass.REPRODUCED, AuditReason.CORRECTNESS_CONFIRMED)
        return verdict(AuditClass.AMBIGUOUS, AuditReason.NO_SPEEDUP_FIGURE)
    if gpu_ok is not True:
        return verdict(AuditClass.AMBIGUOUS, AuditReason.GPU_DIFFERS if gpu_ok is False else AuditReason.GPU_UNKNOWN)
    if iv is None:
        return verdict(AuditClass.AMBIGUOUS, AuditReason.NOT_TIMED)
    target = math.log2(claimed)
    lo, hi = iv[1] - target, iv[2] - target
    if lo >= -band:
        return verdict(AuditClass.REPRODUCED, AuditReason.FASTER_THAN_CLAIMED if lo > band else AuditReason.MATCHED)
    if hi < -band:
        return verdict(AuditClass.REFUTED, AuditReason.SLOWER_THAN_CLAIMED)
    return verdict(AuditClass.AMBIGUOUS, AuditReason.CI_STRADDLES)


def is_comparable(claim: dict[str, Any]) -> bool:
    """The claim's baseline is what our grade measures against (see the module docstring).

    KernelBench eval_results claims state correctness and a runtime, not a ratio: comparable too
    (their correctness is what we check)."""
    fmt, base = claim.get("source_format"), claim.get("baseline")
    if not claim.get("expert_is_reference"):
        return False
    return (fmt, base) in COMPARABLE_BASELINES or (fmt == "kernelbench" and claim.get("claimed_speedup") is None)


# ---- reading the claims files that `kerneltraj import` writes -----------------------------------

def claim_files_beside(attempt_paths: Iterable[str | Path]) -> list[Path]:
    """The `claims.jsonl` that `kerneltraj import` writes beside each imported attempts file."""
    out = []
    for p in map(Path, attempt_paths):
        f = p.with_name(CLAIMS_FILE)
        if f.is_file() and f not in out:
            out.append(f)
    return out


def claim_row(d: dict[str, Any], claims_file: str, run_id: str | None) -> dict[str, Any]:
    """One imported claim (any importer's dict) as an `imported_claims` row."""
    fmt = str(d.get("source_format") or "unknown")
    level = d.get("level")
    if not isinstance(level, int):
        m = re.search(r"_L(\d+)_", str(d.get("task_id") or ""))
        level = int(m[1]) if m else None
    baseline = d.get("baseline") or ("reference" if fmt != "kernelbench" else "eval_results")
    gpu = d.get("gpu") or d.get("hardware")
    claimed = d.get("claimed_speedup")
    claimed = float(claimed) if isinstance(claimed, (int, float)) and not isinstance(claimed, bool) \
        and math.isfinite(claimed) and claimed > 0 else None
    correct = d.get("correctness")
    where = d.get("origin") or ""
    workload = d.get("workload_uuid")  # FlashInfer traces: one claim per workload of an attempt
    claim_id = "|".join([fmt, where, baseline] + ([str(workload)] if workload else []))
    return {"claim_id": claim_id, "source_format": fmt, "origin": where,
            "attempt_id": d.get("attempt_id"), "attempt_admitted": bool(d.get("attempt_admitted")),
            "task_id": d.get("task_id"), "level": level, "gpu": gpu, "baseline": baseline,
            "claimed_speedup": claimed, "claimed_correct": correct if isinstance(correct, bool) else None,
            "claim": json.dumps(d, sort_keys=True, default=str), "claims_file": claims_file, "run_id": run_id}


def read_claims(files: Iterable[Path], run_id: str | None = None) -> list[dict[str, Any]]:
    """Every claim of every file; a line that is not a JSON object stops the audit (we wrote these files)."""
    rows = []
    for f in files:
        for n, raw in enumerate(Path(f).read_bytes().split(b"\n"), 1):
            if not raw.strip():
                continue
            d = json.loads(raw)
            if not isinstance(d, dict):
                raise ValueError(f"{f}:{n}: a claim must be a JSON object")
            rows.append(claim_row(d, str(f), run_id))
    return rows


def audit(con: duckdb.DuckDBPyConnection, claims: list[dict[str, Any]], run_id: str | None = None,
          band: float = TIE_BAND_LOG2) -> int:
    """Replace `imported_claims` and `claim_audit` with these claims and their audit (one transaction
    is the caller's); returns the number of claims audited."""
    run_script(con, "claims.create")
    run_script(con, "claims.clear")
    insert_rows(con, "imported_claims", claims)
    rows = []
    for c in query_dicts(con, load_sql("claims.claims_with_grades")):
        v = classify(c, band)
        claimed = c["claimed_speedup"]
        ratio = claimed / v.measured_speedup if claimed and v.measured_speedup else None
        rows.append({
            "claim_id": c["claim_id"], "source_format": c["source_format"], "attempt_id": c["attempt_id"],
            "task_id": c["task_id"], "level": c["level"], "gpu": c["gpu"], "baseline": c["baseline"],
            "comparable": is_comparable(c), "claimed_speedup": claimed, "claim_bucket": bucket(claimed),
            "status": c["status"], "reason_code": c["reason_code"], "device": c["device"], "same_gpu": v.same_gpu,
            "measured_speedup": v.measured_speedup, "measured_log2_low": v.log2_low,
            "measured_log2_high": v.log2_high, "claimed_over_measured": ratio if is_comparable(c) else None,
            "audit_class": v.audit_class.value, "audit_reason": v.reason.value,
            "grader_version": c["grader_version"], "run_id": run_id})
    insert_rows(con, "claim_audit", rows)
    return len(rows)


def summary(con: duckdb.DuckDBPyConnection, worst: int = 10) -> dict[str, Any]:
    """The audit as plain data: totals, classes, shares by level and claim size, worst offenders."""
    classes = query_dicts(con, load_sql("claims.by_class"))
    return {
        "totals": query_dicts(con, load_sql("claims.totals"))[0],
        "comparable_by_class": _counts(c for c in classes if c["comparable"]),
        "not_comparable_by_class": _counts(c for c in classes if not c["comparable"]),
        "by_reason": {f"{c['audit_class']}/{c['audit_reason']}": int(c["n"]) for c in classes if c["comparable"]},
        "by_level": query_dicts(con, load_sql("claims.by_level")),
        "by_bucket": query_dicts(con, load_sql("claims.by_bucket")),
        "worst_ratio": query_dicts(con, load_sql("claims.worst_ratio"), {"limit": worst}),
        "worst_floored": query_dicts(con, load_sql("claims.worst_floored"), {"limit": worst}),
    }


def _counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    out = {c.value: 0 for c in AuditClass}
    for r in rows:
        out[r["audit_class"]] += int(r["n"])
    return out


def claims_status(ctx: StatusContext) -> dict[str, Any] | None:
    try:
        s = summary(ctx.con, worst=5)
    except duckdb.CatalogException:
        return None
    if not s["totals"]["claims"]:
        return None
    return {"claims": int(s["totals"]["claims"]), "comparable": int(s["totals"]["comparable"]),
            "devices": s["totals"]["devices"], "comparable_by_class": s["comparable_by_class"],
            "not_comparable_by_class": s["not_comparable_by_class"],
            "worst_ratio": [{k: w[k] for k in ("attempt_id", "gpu", "device", "claimed_speedup", "measured_speedup",
                                               "status")} for w in s["worst_ratio"]]}
