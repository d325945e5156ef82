"""The adversarial corpus: every planted cheat ends at the floor, no honest kernel ever does.

`tests/adversarial/cases.json` is the one table of cases (SOL-ExecBench's evil_* samples idea): one row
per file under `cheats/` (a planted cheat for one row of the threat catalogue in GRADER.md, with
variants) and under `honest/` (correct kernels, fast and slow, PyTorch and Triton). Each file is a
candidate module defining `run(*inputs)` for one task of the demo catalogue.

Static tests check the table against the files and the catalogue. The `adversarial` tests grade every
case through the sealed grader in one GraderService batch (start-up is shared), then assert per case;
rows that only make sense on CUDA are also marked `gpu` and skipped without one. Two more
`adversarial` tests keep the corpus itself honest: the honest kernels run directly against the cards'
float64 references (a failing honest grade can then be told apart from a dishonest kernel), and the
cheats run through a deliberately naive KernelBench-style harness (adversarial/naive_harness.py),
which must accept them: each cheat is a real attack, not a strawman.

Optional per-row field: `timeout_s`, the attempt's wall-clock budget (hang cases use a short one).
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import zlib
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

ADVERSARIAL = REPO_ROOT / "tests" / "adversarial"
CASES: list[dict] = json.loads((ADVERSARIAL / "cases.json").read_text())
THREAT_ROWS = range(1, 24)
FLOORED = {"cheat_flagged", "wrong_output", "runtime_error", "timeout", "crashed", "compile_error"}
FIELDS = {"file", "task_id", "language", "threat", "expect_status", "expect_reasons", "gpu_only", "description"}
OPTIONAL = {"timeout_s", "past_clip"}
"""`past_clip`: an honest kernel slower than the expert by more than the speedup clip on the GPU, so the acceptance
expects its sizes to stop early at the clip (bench/gpu_acceptance.py)."""


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _statuses(case: dict) -> list[str]:
    s = case["expect_status"]
    return [s] if isinstance(s, str) else list(s)


def _params(cases: list[dict]):
    for case in cases:
        marks = [pytest.mark.adversarial]
        if case["gpu_only"]:
            marks += [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs a CUDA device")]
        yield pytest.param(case, id=Path(case["file"]).stem, marks=marks)


# ---------------------------------------------------------------- static checks of the table


def test_table_lists_every_file_once():
    on_disk = {f"{d}/{p.name}" for d in ("cheats", "honest") for p in (ADVERSARIAL / d).glob("*.py")}
    listed = [c["file"] for c in CASES]
    assert len(listed) == len(set(listed)), "a file is listed twice"
    assert set(listed) == on_disk, {"missing from table": sorted(on_disk - set(listed)),
                                    "listed but absent": sorted(set(listed) - on_disk)}


def test_corpus_covers_every_threat_row():
    cheats = [c for c in CASES if c["threat"] is not None]
    honest = [c for c in CASES if c["threat"] is None]
    assert {c["threat"] for c in cheats} == set(THREAT_ROWS)
    assert len(cheats) >= 35
    assert len(honest) >= 30
    assert sum(c["language"] == "triton" for c in honest) >= 12
    assert not any(c["gpu_only"] for c in honest), "honest kernels must also be graded on CPU"


def test_rows_are_well_formed():
    from grader.catalogue import load_catalogue
    from grader.contract import Reason, Status

    tasks = load_catalogue()
    for c in CASES:
        where = c["file"]
        assert FIELDS <= set(c) <= FIELDS | OPTIONAL, (where, sorted(set(c) ^ FIELDS))
        assert c["task_id"] in tasks, where
        assert c["language"] in ("triton", "pytorch"), where
        assert isinstance(c["gpu_only"], bool), where
        assert c.get("past_clip", False) is False or (c["past_clip"] is True and c["threat"] is None), where
        assert c["description"].strip() and "\n" not in c["description"], where
        statuses = _statuses(c)
        assert statuses and all(Status(s) for s in statuses), where
        assert c["expect_reasons"] and all(Reason(r) for r in c["expect_reasons"]), where
        if c["threat"] is None:
            assert where.startswith("honest/") and statuses == ["correct"] and c["expect_reasons"] == ["ok"], where
        else:
            assert where.startswith("cheats/"), where
            assert Path(where).name[:3] == f"{c['threat']:02d}_", f"{where}: file name must start with its threat row"
            assert set(statuses) <= FLOORED, f"{where}: a cheat may only expect floored statuses"
            assert "ok" not in c["expect_reasons"], where
        assert float(c.get("timeout_s", 60)) > 0, where


HARDCODED_PUBLIC = {
    # cheats that act on the public sizes they were shown; if a card's public sizes move, the cheat
    # would silently turn honest (or useless), so the corpus is checked against the catalogue
    "cheats/03_hardcoded_seed42_answer.py": {(64, 256), (8192, 1024), (4096, 4096)},
    "cheats/03_hardcoded_literal_argmax.py": {(64, 256)},
    "cheats/20_public_shapes_only.py": {(64, 256), (8192, 1024), (4096, 4096)},
}


def test_cheats_built_on_public_sizes_match_the_cards():
    from grader.catalogue import load_catalogue

    tasks = load_catalogue()
    by_file = {c["file"]: c for c in CASES}
    for file, shapes in HARDCODED_PUBLIC.items():
        card = tasks[by_file[file]["task_id"]]
        public = {tuple(s[a] for a in ("M", "N")) for p in ("cpu", "gpu") for s in card.public_sizes.get(p, ())}
        hidden = {tuple(s[a] for a in ("M", "N")) for p in ("cpu", "gpu") for s in card.hidden_sizes.get(p, ())}
        cpu = {(s["M"], s["N"]) for s in card.public_sizes["cpu"]}
        assert shapes <= public and shapes & cpu, f"{file} hard-codes {sorted(shapes)}; public sizes: {sorted(public)}"
        assert not shapes & hidden, file
    wide = tasks[by_file["cheats/15_skip_work_on_wide_rows.py"]["task_id"]]
    assert all(s["N"] % 256 == 0 for p in ("cpu", "gpu") for s in wide.public_sizes[p])
    assert any(s["N"] % 256 for s in wide.hidden_sizes["cpu"]), "15_skip_work_on_wide_rows must be honest on a CPU size"


@pytest.mark.parametrize("case", CASES, ids=[Path(c["file"]).stem for c in CASES])
def test_source_defines_run_and_own_kernels(case):
    tree = ast.parse((ADVERSARIAL / case["file"]).read_text())
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert "run" in top, "a candidate module must define run(*inputs) at top level"
    jitted = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
              and any(ast.unparse(d).startswith(("triton.jit", "jit")) for d in n.decorator_list)]
    if case["language"] == "triton":
        assert jitted, "a Triton case must define at least one @triton.jit kernel"
    assert ast.get_docstring(tree), "every case file says in its docstring what it does"


# ---------------------------------------------------------------- honest kernels, graded directly


def _load_candidate(case: dict):
    path = ADVERSARIAL / case["file"]
    name = "kt_adv_" + path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("case", list(_params([c for c in CASES if c["threat"] is None])))
def test_honest_kernel_matches_float64_reference(case):
    """Outside the grader: every CPU size of the card, card inputs and tolerances, no forbidden op."""
    if not _cuda():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    from torch.profiler import ProfilerActivity, profile

    from grader.catalogue import load_catalogue
    from grader.compare import compare
    from grader.inputs import make_inputs, resolve_specs, upcast
    from grader.modload import load_source

    card = load_catalogue()[case["task_id"]]
    device = "cuda" if _cuda() else "cpu"
    profile_name = "gpu" if device == "cuda" else "cpu"
    ref = load_source(card.reference, f"kt_adv_ref_{card.task_id}", str(_scratch())).run
    scale = (load_source(card.error_scale, f"kt_adv_scale_{card.task_id}", str(_scratch())).run
             if card.error_scale else None)
    fn = _load_candidate(case).run
    atol, rtol = card.tolerance()
    for size, hidden in card.sizes(profile_name):
        specs = resolve_specs(card, size)
        seed = zlib.crc32(f"{case['file']}:{size}".encode())
        inputs = make_inputs(specs, seed, device)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out = fn(*inputs)
        ops = {ev.name for ev in prof.events()}
        assert not ops & set(card.forbidden_ops), f"{size}: called {sorted(ops & set(card.forbidden_ops))}"
        assert type(out) is torch.Tensor and out.dtype == getattr(torch, card.output_dtype)
        for got, fresh in zip(inputs, make_inputs(specs, seed, device)):
            assert torch.equal(got, fresh), f"{size}: the kernel changed its inputs"
        wide = upcast(inputs)
        verdict = compare(out, ref(*wide), atol, rtol, scale(*wide) if scale else None)  # as the grader judges
        assert verdict.ok, f"{'hidden' if hidden else 'public'} size {size}: {verdict.detail}"


_SCRATCH: list[Path] = []


def _scratch() -> Path:
    if not _SCRATCH:
        import tempfile

        _SCRATCH.append(Path(tempfile.mkdtemp(prefix="kt-adv-ref-")))
    return _SCRATCH[0]


# ---------------------------------------------------------------- each cheat fools a naive harness

NAIVE_SIZES = {
    # KernelBench-like sizes the Triton interpreter runs in a second; wide rows so atol=1e-2 is loose.
    "gelu_fp32": {"M": 64, "N": 1024}, "bias_leaky_relu_fp32": {"M": 64, "N": 1024},
    "row_sum_fp32": {"M": 16, "N": 1024}, "row_max_fp32": {"M": 16, "N": 1024},
    "col_mean_fp32": {"M": 262144, "N": 16}, "softmax_rows_fp32": {"M": 16, "N": 16384},
    "log_softmax_rows_fp32": {"M": 16, "N": 1024}, "layernorm_fp32": {"M": 4, "N": 65536},
    "rmsnorm_fp32": {"M": 32, "N": 1024}, "rmsnorm_fp16": {"M": 16, "N": 1024},
    "matmul_fp32": {"M": 64, "N": 64, "K": 64}, "linear_bias_relu_fp16": {"M": 64, "N": 64, "K": 128},
    "attention_fp16": {"B": 1, "H": 2, "S": 64, "D": 64}, "cross_entropy_fp32": {"M": 16, "V": 32000},
    "cumsum_fp32": {"M": 16, "N": 1024}, "row_argmax_int64": {"M": 64, "N": 256},
    "topk_values_fp32": {"M": 16, "N": 1024},
}
NAIVE_SIZE_FOR = {
    # the one size a naive harness checks; the cheat misbehaves on the others, which it only times
    "cheats/03_hardcoded_seed42_answer.py": {"M": 64, "N": 256},
    "cheats/20_public_shapes_only.py": {"M": 64, "N": 256},
    "cheats/21_last_row_copied.py": {"M": 128, "N": 1024},
    "cheats/15_skip_work_on_wide_rows.py": {"M": 16, "N": 1000},
    "cheats/15_broadcast_first_row_on_big_sizes.py": {"M": 32, "N": 1024},
}
NOT_NAIVE = {
    # cheats aimed at something a naive in-process harness does not have, or that break it by design
    "cheats/01_stale_empty_like.py": "relies on the CUDA caching allocator handing back the freed block; "
                                     "glibc on CPU does not do so reliably",
    "cheats/01_stale_triton_noop_kernel.py": "relies on the CUDA caching allocator handing back the freed block; "
                                             "glibc on CPU does not do so reliably",
    "cheats/10_patch_wire_send_scrub_ops.py": "rewrites the sealed worker's own messages",
    "cheats/10_patch_timing_methods.py": "rewrites the sealed worker's own timing methods",
    "cheats/22_environment_secrets.py": "needs a secret in the environment to steal",
    "cheats/22_network_fetch.py": "needs a reachable network service",
    "cheats/22_other_attempts_scratch.py": "needs another attempt's scratch dir on the host",
    "cheats/22_dup2_devnull_over_channels.py": "points every pipe at /dev/null for good, and the naive harness's "
                                               "child reports its verdict to the parent over a pipe",
    "cheats/10_audit_hook_fills_on_next_event.py": "the naive harness raises no audit event between the call and its "
                                                   "checks (time.sleep and torch ops are not audited on this "
                                                   "interpreter), so the hook first runs after the comparison",
}


def _naive_cases() -> list[dict]:
    return [c for c in CASES if c["threat"] is not None and c["threat"] != 23 and c["file"] not in NOT_NAIVE]


@pytest.fixture(scope="module")
def naive_verdicts(tmp_path_factory):
    """Run every naive-harness case in one subprocess (each in its own fork); {file: verdict}."""
    import subprocess
    import sys

    todo = [{"file": c["file"], "task_id": c["task_id"],
             "size": NAIVE_SIZE_FOR.get(c["file"], NAIVE_SIZES[c["task_id"]])}
            for c in _naive_cases() if not c["gpu_only"]]
    spec = tmp_path_factory.mktemp("naive") / "cases.json"
    spec.write_text(json.dumps(todo))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, str(ADVERSARIAL / "naive_harness.py"), str(spec)], capture_output=True,
                          text=True, timeout=1200, env=env, cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_params(_naive_cases())))
def test_cheat_fools_a_naive_harness(case, naive_verdicts):
    """The cheat is a real attack: a KernelBench-style in-process check accepts it."""
    verdict = naive_verdicts[case["file"]]
    assert verdict["accepted"], verdict["detail"]


# ---------------------------------------------------------------- the whole corpus through the grader


@pytest.fixture(scope="module")
def graded():
    """Grade every runnable case in one GraderService batch; {file: GradeResult}."""
    from grader.contract import GradeRequest
    from grader.service import GraderService

    cuda = _cuda()
    requests = []
    for case in CASES:
        if case["gpu_only"] and not cuda:
            continue
        requests.append(GradeRequest(
            attempt_id=f"adv/{case['file']}", task_id=case["task_id"], source=(ADVERSARIAL / case["file"]).read_text(),
            language=case["language"], seed=zlib.crc32(case["file"].encode()),
            timeout_s=float(case.get("timeout_s", 60.0 if cuda else 120.0))))
    workers = int(os.environ.get("KT_ADVERSARIAL_WORKERS", "2"))
    with GraderService(mode="zygote", workers=workers) as svc:
        results = {r.attempt_id.removeprefix("adv/"): r for r in svc.grade(requests)}
    assert len(results) == len(requests), "the grader must return exactly one result per request"
    report = os.environ.get("KT_ADVERSARIAL_REPORT")  # optional: every verdict as JSON lines, for triage
    if report:
        Path(report).write_text("".join(r.to_json() + "\n" for r in results.values()))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("case", list(_params(CASES)))
def test_case_is_graded_as_expected(case, graded):
    from grader.contract import REWARD_FLOOR

    r = graded[case["file"]]
    seen = (f"{r.status.value}/{r.reason_code.value}: {r.reason} | reward {r.reward} | "
            f"measured speedup {r.measured_speedup_geomean} | sandbox {r.sandbox}")
    if case["threat"] is None:
        assert r.status.value == "correct", seen
        assert r.reward > REWARD_FLOOR, seen
        return
    assert r.reward == REWARD_FLOOR, seen
    assert r.status.value in _statuses(case), seen
    assert r.reason_code.value in case["expect_reasons"], seen
