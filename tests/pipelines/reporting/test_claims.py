"""Claim audit: hand-built claims and grades in a real DuckDB warehouse, then real CUDA-L1 rows.

Each hand-built case states the class it must end in and why; the real-data test recomputes its
expectations from the raw CUDA-L1 lines with plain `json`.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from pathlib import Path

import duckdb
import pytest

from pipelines.reporting.claim_report import audit_png, report_markdown
from pipelines.grading.passes import PASS_PRIMARY, commit_grades, grade_row, pass_seed
from pipelines.core.attempt_files import attempt_row
from grader.contract import GRADER_VERSION
from pipelines.reporting import claim_audit as cl
from pipelines.reporting.status_sections import StatusContext
from pipelines.core.warehouse import connect, insert_rows, query_dicts, run_script, transaction
from tests.conftest import REPO_ROOT

CUDA_L1 = REPO_ROOT / ".." / "shared" / "data" / "cuda-l1"
H200 = "NVIDIA H200"
NOW = dt.datetime(2025, 1, 1)


# ---- hand-built warehouse ---------------------------------------------------------------------

def _size(cand_ms: float, expert_ms: float, rel_ci: float = 0.002) -> dict:
    """A stored size row as `pipelines.grading.passes.public_sizes` writes it (speedup clipped like the grader's)."""
    return {"size_key": "N=1", "hidden": False, "cand_ms": cand_ms, "expert_ms": expert_ms,
            "cand_ms_ci": [cand_ms * (1 - rel_ci), cand_ms * (1 + rel_ci)],
            "expert_ms_ci": [expert_ms * (1 - rel_ci), expert_ms * (1 + rel_ci)], "reps": 50,
            "speedup": min(max(expert_ms / cand_ms, 1 / 64), 8.0), "max_rel_err": 0.1}


# attempt -> (status, device, sizes or None); graded under the current grader version
GRADES = {
    "a_match": ("correct", H200, [_size(1.0, 2.02)]),
    "a_clip": ("correct", H200, [_size(0.1, 1.22)]),  # 12.2x measured, stored clipped at 8x
    "a_slow": ("correct", H200, [_size(1.0, 2.0)]),
    "a_wrong": ("wrong_output", H200, None),
    "a_cheat": ("cheat_flagged", H200, None),
    "a_wide": ("correct", H200, [_size(1.0, 1.9, rel_ci=0.2)]),
    "a_h100": ("correct", H200, [_size(1.0, 3.0)]),
    "a_h20": ("correct", H200, [_size(1.0, 3.0)]),
    "a_cpu": ("unsupported_on_backend", "cpu", None),
    "a_infra": ("infra_error", H200, None),
    "a_cerr_other": ("compile_error", H200, None),
    "a_cerr_same": ("compile_error", H200, None),
    "a_kb_ok": ("correct", H200, [_size(1.0, 1.0)]),
    "a_kb_bad": ("wrong_output", H200, None),
    "a_small": ("correct", H200, [_size(1.0, 1.0)]),
}
# claim: (attempt, format, gpu, baseline, claimed speedup, claimed correctness) -> expected (class, reason)
CASES = [
    (("a_match", "cuda-l1", "h200", "default", 2.0, None), ("reproduced", "matched")),
    (("a_clip", "cuda-l1", "h200", "default", 12.0, None), ("reproduced", "matched")),
    (("a_slow", "cuda-l1", "h200", "default", 1.2, None), ("reproduced", "faster_than_claimed")),
    (("a_small", "cuda-l1", "h200", "default", 1.02, None), ("reproduced", "matched")),
    (("a_slow", "cuda-l1", "h200", "cuda_graph", 9.0, None), ("ambiguous", "baseline_differs")),
    (("a_match", "cuda-l1", "h200", "torch_compile_default", 5.0, None), ("ambiguous", "baseline_differs")),
    (("a_wide", "cuda-l1", "h200", "default", 10.0, None), ("refuted", "slower_than_claimed")),
    (("a_wrong", "cuda-l1", "h200", "default", 50.0, None), ("refuted", "floored")),
    (("a_cheat", "cuda-l1", "h100", "default", 368.0, None), ("refuted", "floored")),  # any GPU
    (("a_wide", "cuda-l1", "h200", "default", 2.0, None), ("ambiguous", "ci_straddles")),
    (("a_h100", "cuda-l1", "h100", "default", 3.0, None), ("ambiguous", "gpu_differs")),
    (("a_h20", "cuda-l1", "h20", "default", 3.0, None), ("ambiguous", "gpu_differs")),  # h20 is not H200
    (("a_cpu", "cuda-l1", "h200", "default", 4.0, None), ("not_graded", "unsupported_on_backend")),
    (("a_infra", "cuda-l1", "h200", "default", 4.0, None), ("not_graded", "infra_error")),
    (("a_quarantined", "cuda-l1", "h200", "default", 7.0, None), ("not_graded", "not_admitted")),
    (("a_pending", "cuda-l1", "h200", "default", 1.5, None), ("not_graded", "no_grade")),
    (("a_stale", "cuda-l1", "h200", "default", 1.5, None), ("not_graded", "no_grade")),
    (("a_cerr_other", "cuda-l1", "a100", "default", 2.0, None), ("ambiguous", "gpu_differs")),
    (("a_cerr_same", "cuda-l1", "h200", "default", 2.0, None), ("refuted", "floored")),
    (("a_kb_ok", "kernelbench", "NVIDIA H200", None, None, True), ("reproduced", "correctness_confirmed")),
    (("a_kb_bad", "kernelbench", "NVIDIA H200", None, None, True), ("refuted", "floored")),
    (("a_kb_ok", "kernelbench", "NVIDIA H200", None, None, False), ("ambiguous", "no_speedup_figure")),
]


def _claim(n: int, aid: str, fmt: str, gpu: str, baseline: str | None, claimed: float | None,
           correct: bool | None) -> dict:
    """A claim dict shaped as the importer writes it (cuda-l1 or kernelbench eval_results)."""
    task = f"kernelbench_L{1 + n % 3}_{n:03d}"
    if fmt == "cuda-l1":
        return {"source_format": fmt, "origin": f"h.jsonl:{n}", "attempt_id": aid, "task_id": task,
                "attempt_admitted": aid != "a_quarantined", "gpu": gpu, "level": 1 + n % 3, "baseline": baseline,
                "claimed_speedup": claimed, "claimed_raw": str(claimed)}
    return {"source_format": fmt, "origin": f"run/eval_results.json#{n}", "attempt_id": aid, "task_id": task,
            "attempt_admitted": True, "run": "run", "compiled": True, "correctness": correct, "runtime_ms": 1.0,
            "runtime_stats": {}, "hardware": gpu}


def _grade(aid: str, task: str, status: str, device: str, sizes: list | None, version: str = GRADER_VERSION) -> dict:
    return {"attempt_id": aid, "grading_pass": "primary", "task_id": task, "task_revision": "rev1",
            "grader_version": version, "source_sha256": f"sha-{aid}", "fingerprint_id": "fp", "status": status,
            "reason_code": "ok" if status == "correct" else status, "reward": 0.0 if status == "correct" else -24.0,
            "sizes": json.dumps(sizes or []), "device": device, "graded_at": NOW}


@pytest.fixture()
def audited(tmp_path: Path):
    claims = [_claim(n, *spec) for n, (spec, _) in enumerate(CASES)]
    tasks = {c["task_id"] for c in claims}
    task_of: dict[str, str] = {}
    for c in claims:
        task_of.setdefault(c["attempt_id"], c["task_id"])
    with connect(tmp_path / "w.duckdb") as con:
        with transaction(con):
            run_script(con, "grading.set_version", {"grader_version": GRADER_VERSION})
            insert_rows(con, "tasks", [{"task_id": t, "task_revision": "rev1", "lineage": f"kernelbench/L{t[13]}"}
                                       for t in sorted(tasks)])
            insert_rows(con, "raw_attempts", [
                {"attempt_id": a, "task_id": t, "trajectory_id": a, "turn": 1, "source_sha256": f"sha-{a}",
                 "origin": "x", "source_format": "cuda-l1"} for a, t in task_of.items() if a != "a_quarantined"])
            insert_rows(con, "graded_attempts", [_grade(a, task_of[a], *GRADES[a]) for a in GRADES] + [
                _grade("a_stale", task_of["a_stale"], "correct", H200, [_size(1.0, 2.0)], version="0.0.old")])
        rows = [cl.claim_row(c, "claims.jsonl", "run1") for c in claims]
        with transaction(con):
            n = cl.audit(con, rows, "run1")
        yield con, n, claims


def test_every_case_lands_in_its_class(audited) -> None:
    con, n, claims = audited
    assert n == len(CASES)
    got = {r["claim_id"]: (r["audit_class"], r["audit_reason"])
           for r in query_dicts(con, "SELECT claim_id, audit_class, audit_reason FROM claim_audit")}
    want = {cl.claim_row(c, "", None)["claim_id"]: exp for c, (_, exp) in zip(claims, CASES)}
    assert got == want
    assert {c for c, _ in want.values()} == {k.value for k in cl.AuditClass}


def test_refuted_keeps_status_and_clip_is_not_used(audited) -> None:
    con, _, _ = audited
    rows = {(r["attempt_id"], r["baseline"]): r for r in query_dicts(con, "SELECT * FROM claim_audit")}
    assert rows[("a_cheat", "default")]["status"] == "cheat_flagged"
    assert rows[("a_cheat", "default")]["same_gpu"] is False
    clip = rows[("a_clip", "default")]
    assert clip["measured_speedup"] == pytest.approx(12.2, rel=1e-9)  # not the stored 8x
    assert rows[("a_h100", "default")]["claimed_over_measured"] == pytest.approx(1.0)
    assert rows[("a_slow", "cuda_graph")]["claimed_over_measured"] is None  # other baseline: no ratio


def test_summary_shares_and_worst(audited) -> None:
    con, _, _ = audited
    s = cl.summary(con)
    comparable = [spec for spec, _ in CASES if spec[3] in ("default", None)]
    assert s["totals"]["claims"] == len(CASES) and s["totals"]["comparable"] == len(comparable)
    assert sum(s["comparable_by_class"].values()) == len(comparable)
    assert sum(s["not_comparable_by_class"].values()) == len(CASES) - len(comparable)
    for key in ("by_level", "by_bucket"):
        groups: dict = {}
        for r in s[key]:
            g = (r.get("source_format"), r.get("level"), r.get("claim_bucket"))
            groups[g] = groups.get(g, 0.0) + r["share"]
        assert all(math.isclose(v, 1.0) for v in groups.values()), (key, groups)
    assert {r["claim_bucket"] for r in s["by_bucket"]} == {"<1.1x", "1.1-2x", "2-10x", ">=10x"}
    ratios = [w["claimed_over_measured"] for w in s["worst_ratio"]]
    assert ratios == sorted(ratios, reverse=True) and s["worst_ratio"][0]["attempt_id"] == "a_wide"
    assert s["worst_floored"][0]["claimed_speedup"] == 368.0 and s["worst_floored"][0]["status"] == "cheat_flagged"
    md = report_markdown(s)
    assert "a_wide" in md and "gpu_differs" in md and ">=10x" in md
    assert audit_png(query_dicts(con, "SELECT * FROM claim_audit WHERE comparable")).startswith(b"\x89PNG")
    section = cl.claims_status(StatusContext(con, None, None))
    assert section["claims"] == len(CASES) and section["comparable_by_class"] == s["comparable_by_class"]


def test_status_section_absent_without_tables() -> None:
    con = duckdb.connect()
    assert cl.claims_status(StatusContext(con, None, None)) is None


@pytest.mark.parametrize("claim_gpu,device,same", [
    ("h100", "NVIDIA H100 80GB HBM3", True), ("h20", "NVIDIA H200", False), ("h200", "NVIDIA H200", True),
    ("l40", "NVIDIA L40S", False), ("3090", "NVIDIA GeForce RTX 3090", True), ("a100", "NVIDIA A100-SXM4-80GB", True),
    ("h100", "cpu", False), (None, "NVIDIA H200", None), ("NVIDIA", "NVIDIA H200", False)])
def test_same_gpu_by_whole_tokens(claim_gpu, device, same) -> None:
    assert cl.same_gpu(claim_gpu, device) is same


def test_buckets_are_half_open() -> None:
    assert [cl.bucket(x) for x in (1.0, 1.1, 1.99, 2.0, 9.99, 10.0, 368.0)] == \
        ["<1.1x", "1.1-2x", "1.1-2x", "2-10x", "2-10x", ">=10x", ">=10x"]


# ---- real CUDA-L1 rows, imported, ingested and graded on CPU -----------------------------------

@pytest.mark.skipif(not CUDA_L1.is_dir(), reason="shared CUDA-L1 corpus not present")
def test_real_cuda_l1_rows_are_counted_on_cpu(tmp_path: Path) -> None:
    from pipelines.importers import cuda_l1
    from pipelines.grading.backend import GradingBackend

    lines = (CUDA_L1 / "h100.jsonl").read_bytes().splitlines()
    raw = [json.loads(ln) for ln in lines]
    # Three CUDA candidates and one row whose candidate is the literal text 'None' (quarantined at import).
    pick = [i for i, r in enumerate(raw) if "load_inline" in (r["custom_code"] or "")][:3]
    pick += [next(i for i, r in enumerate(raw) if (r["custom_code"] or "").strip() == "None")]
    corpus = tmp_path / "h100.jsonl"  # the GPU comes from the file name
    corpus.write_bytes(b"\n".join(lines[i] for i in pick) + b"\n")
    batch = cuda_l1.import_path([corpus])
    assert len(batch.attempts) + len(batch.quarantined) == len(pick)

    out = tmp_path / "imports" / "cuda-l1"
    out.mkdir(parents=True)
    (out / "tasks.jsonl").write_text("".join(json.dumps(dataclasses.asdict(c), default=list) + "\n"
                                             for c in batch.cards))
    (out / "claims.jsonl").write_text("".join(json.dumps(c, sort_keys=True, default=list) + "\n"
                                              for c in batch.claims))
    (out / "attempts.jsonl").write_text("")
    backend = GradingBackend(mode="fresh", workers=1, profile="cpu", timeout_s=60, retries=0,
                             task_files=[str(out / "tasks.jsonl")])
    reqs = [backend.request(a.attempt_id, a.task_id, a.source, a.language, a.entry_point,
                            pass_seed(a.attempt_id, PASS_PRIMARY)) for a in batch.attempts]
    outcomes = list(backend.grade(reqs))
    with connect(tmp_path / "w.duckdb") as con:
        with transaction(con):
            run_script(con, "grading.set_version", {"grader_version": GRADER_VERSION})
            insert_rows(con, "raw_attempts", [attempt_row(a, "sha", "run1", NOW) for a in batch.attempts])
            insert_rows(con, "tasks", [{"task_id": c.task_id, "task_revision": c.revision, "lineage": c.lineage}
                                       for c in batch.cards])
    src = {a.attempt_id: a.source_sha256 for a in batch.attempts}
    from pipelines.defs.resources import Warehouse

    commit_grades(Warehouse(path=str(tmp_path / "w.duckdb")),
                  [grade_row(o, PASS_PRIMARY, src[o.result.attempt_id], "run1", NOW) for o in outcomes],
                  {o.result.fingerprint_id: o.result.fingerprint for o in outcomes}, "run1")
    with connect(tmp_path / "w.duckdb") as con:
        with transaction(con):
            n = cl.audit(con, cl.read_claims(cl.claim_files_beside([out / "attempts.jsonl"])), "run1")
        rows = query_dicts(con, "SELECT * FROM claim_audit")
        s = cl.summary(con)

    # Expectations from the raw lines: one claim per non-null score, each kept whatever happened.
    expected = [(f"cuda-l1:h100:L{raw[i]['level_id']}:T{raw[i]['task_id']}", k.removeprefix("score_"))
                for i in pick for k in cuda_l1.SCORE_FIELDS if raw[i].get(k) is not None]
    assert n == len(rows) == len(expected)
    assert sorted((r["attempt_id"], r["baseline"]) for r in rows) == sorted(expected)
    admitted = {a.attempt_id for a in batch.attempts}
    cards = {c.task_id for c in batch.cards}
    assert admitted and all(o.result.status.value == "unsupported_on_backend" for o in outcomes)
    for r in rows:
        assert r["audit_class"] == "not_graded"
        assert r["audit_reason"] == ("unsupported_on_backend" if r["attempt_id"] in admitted else "not_admitted")
        assert r["gpu"] == "h100" and r["comparable"] == (r["baseline"] == "default" and r["task_id"] in cards)
    assert s["comparable_by_class"]["not_graded"] == sum(r["comparable"] for r in rows)
    assert s["comparable_by_class"]["reproduced"] == s["comparable_by_class"]["refuted"] == 0


def test_asset_materialises_from_claims_beside_attempts(tmp_path: Path) -> None:
    import dagster as dg

    from assets.claims import claim_audit, every_claim_audited
    from pipelines.defs.resources import AttemptSources, Warehouse

    folder = tmp_path / "imports" / "cuda-l1"
    folder.mkdir(parents=True)
    (folder / "attempts.jsonl").write_text("")
    claims = [_claim(n, *spec) for n, (spec, _) in enumerate(CASES)]
    (folder / "claims.jsonl").write_text("".join(json.dumps(c) + "\n" for c in claims) + "\n")
    wh = str(tmp_path / "w.duckdb")
    res = dg.materialize([claim_audit, every_claim_audited], resources={
        "warehouse": Warehouse(path=wh), "attempt_sources": AttemptSources(paths=[str(folder / "attempts.jsonl")])})
    assert res.success
    md = res.asset_materializations_for_node("claim_audit")[0].metadata
    assert md["dagster/row_count"].value == len(CASES)
    assert "data:image/png;base64," in md["claimed_vs_measured"].value  # no log storage to serve it from
    # Empty warehouse: no task cards (so nothing is comparable) and no grades; every claim is still counted.
    with connect(wh) as con:
        s = cl.summary(con)
    assert sum(s["comparable_by_class"].values()) == 0
    assert s["not_comparable_by_class"]["not_graded"] == len(CASES)
    [check] = res.get_asset_check_evaluations()
    assert check.passed


def test_picture_is_a_short_image_the_webserver_serves(tmp_path: Path, instance) -> None:
    """On a real instance the picture is drawn inline on the asset page: a Markdown image under Dagster's
    inline limit, whose PNG lies where the webserver's /logs/ route reads it."""
    import dagster as dg

    from assets.claims import claim_audit
    from assets.common import INLINE_MARKDOWN_CHARS
    from pipelines.defs.resources import AttemptSources, Warehouse

    (tmp_path / "attempts.jsonl").write_text("")
    res = dg.materialize([claim_audit], instance=instance, resources={
        "warehouse": Warehouse(path=str(tmp_path / "w.duckdb")),
        "attempt_sources": AttemptSources(paths=[str(tmp_path / "attempts.jsonl")])})
    md = res.asset_materializations_for_node("claim_audit")[0].metadata["claimed_vs_measured"].value
    assert len(md) < INLINE_MARKDOWN_CHARS and md.startswith("![claimed against measured](/logs/"), md
    *key, ext = md[len("![claimed against measured](/logs/"):-1].split("/")  # as dagster-webserver splits it
    served = Path(instance.compute_log_manager.get_captured_local_path(key, ext))
    assert served.read_bytes().startswith(b"\x89PNG")
