"""Importers on the real shared corpora and on our own KernelBench-style run folder.

Every expected count below is recomputed here from the raw files with plain `json`, not taken
from the importer, so a record the importer drops or double-counts fails the test.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import math
from pathlib import Path

import pytest
import torch

from grader.adapters import kernelbench_candidate_source, kernelbench_reference_source
from grader.contract import GradeResult, Reason, SizeResult, Status, reward
from grader.taskcard import size_key
from pipelines.publishing.export_traces import export_traces, parse_size_key
from pipelines.importers import IMPORTERS, ImportBatch
from pipelines.core.rawattempt import RawAttempt
from tests.conftest import REPO_ROOT
from tests.grader.test_sandbox_isolation import hostile_module_level, needs_root
from tests.grader.test_sandbox_isolation import listener  # noqa: F401,F811 - a fixture

DATA = REPO_ROOT / ".." / "shared" / "data"
CUDA_L1 = DATA / "cuda-l1"
KERNELBENCH_DATA = DATA / "kernelbench"
FIB = DATA / "flashinfer-trace"
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "kernelbench_run"
needs_data = pytest.mark.skipif(not CUDA_L1.is_dir() or not FIB.is_dir(), reason="shared corpora not present")


def _accounted(batch: ImportBatch) -> None:
    """Shared invariants: unique ids, reasons everywhere, origins that point at a record."""
    ids = [a.attempt_id for a in batch.attempts]
    assert len(ids) == len(set(ids))
    assert all(q.reason_code and q.reason for q in batch.quarantined + batch.rejected)
    assert all(a.origin and a.source_format == batch.format for a in batch.attempts)
    assert len({c.task_id for c in batch.cards}) == len(batch.cards)
    assert {a.task_id for a in batch.attempts} <= {c.task_id for c in batch.cards}


# ---- CUDA-L1 ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_l1() -> ImportBatch:
    return IMPORTERS["cuda-l1"].import_path([CUDA_L1])


@pytest.mark.slow
@needs_data
def test_cuda_l1_every_row_accounted(cuda_l1: ImportBatch) -> None:
    rows = []
    for f in sorted(CUDA_L1.glob("*.jsonl")):
        for n, line in enumerate(f.read_bytes().splitlines(), 1):
            if line.strip():
                rows.append((f"{f}:{n}", line, json.loads(line)))
    assert len(rows) == 1250
    code = lambda r: r["custom_code"] or ""  # noqa: E731
    empty = [w for w, _, r in rows if not code(r).strip()]
    placeholder = [w for w, _, r in rows if code(r).strip() == "None"]
    scores = sum(1 for _, _, r in rows for k in r if k.startswith("score_") and r[k] is not None)
    tasks = {(r["level_id"], r["task_id"]) for _, _, r in rows}

    assert cuda_l1.n_records == len(rows) == len(cuda_l1.attempts) + len(cuda_l1.quarantined)
    by_reason = collections.defaultdict(set)
    for q in cuda_l1.quarantined:
        by_reason[q.reason_code].add(q.origin)
    assert by_reason["empty_source"] == set(empty) and len(empty) == 106
    assert by_reason["placeholder_source"] == set(placeholder) and len(placeholder) == 80
    assert set(by_reason) <= {"empty_source", "placeholder_source", "unsupported_task"}
    # every task is either a card or a rejected task with a reason, never both, never neither
    rejected = {q.origin for q in cuda_l1.rejected}
    assert len(cuda_l1.cards) + len(rejected) == len(tasks) == 250
    card_ids = {c.task_id for c in cuda_l1.cards}
    gradable = [w for w, _, r in rows if code(r).strip() not in ("", "None")
                and f"kernelbench_L{r['level_id']}_{r['task_id']:03d}" in card_ids]
    assert sorted(a.origin for a in cuda_l1.attempts) == sorted(gradable)
    assert len(by_reason["unsupported_task"]) == len(rows) - len(empty) - len(placeholder) - len(gradable)
    assert len(cuda_l1.claims) == scores
    _accounted(cuda_l1)


@needs_data
def test_cuda_l1_lineage_and_mapping(cuda_l1: ImportBatch) -> None:
    raw = {f"{f}:{n}": line for f in sorted(CUDA_L1.glob("*.jsonl"))
           for n, line in enumerate(f.read_bytes().splitlines(), 1)}
    for a in cuda_l1.attempts:
        row = json.loads(raw[a.origin])
        assert a.extra["original_sha256"] == hashlib.sha256(raw[a.origin]).hexdigest()
        assert a.source == row["custom_code"] and a.entry_point == "ModelNew"
        assert a.task_id == f"kernelbench_L{row['level_id']}_{row['task_id']:03d}"
        assert a.extra["gpu"] == Path(a.origin.rsplit(":", 1)[0]).stem
        assert a.claimed_speedup == pytest.approx(float(row["score_default"]))
        uses_ext = "load_inline" in a.source or "cpp_extension" in a.source
        assert a.language == ("cuda" if uses_ext else "pytorch")
    claims = [c for c in cuda_l1.claims if c["attempt_id"] == "cuda-l1:h100:L1:T1"]
    assert {c["baseline"] for c in claims} == {"default", "torch_compile_default",
                                                "torch_compile_reduce_overhead", "cuda_graph", "cudnn"}
    assert all(c["gpu"] == "h100" and c["level"] == 1 for c in claims)


@needs_data
def test_cuda_l1_cards(cuda_l1: ImportBatch) -> None:
    cards = {c.task_id: c for c in cuda_l1.cards}
    mm = cards["kernelbench_L1_001"]
    assert [i.shape for i in mm.inputs] == [("N", "N"), ("N", "N")]
    assert mm.public_sizes["gpu"] == ({"N": 2048},) and mm.output_shape == ("N", "N")
    # hidden sizes rebind the one size constant that leads every input and that only get_inputs reads
    assert mm.hidden_sizes["gpu"] == ({"N": 1024}, {"N": 2047}) and not mm.hidden_sizes_note
    assert all(bool(c.hidden_sizes) != bool(c.hidden_sizes_note) for c in cards.values())
    assert sum(bool(c.hidden_sizes) for c in cards.values()) >= 200, "most tasks get hidden sizes"
    rnn = cards["kernelbench_L3_035"]  # its reference reads batch_size itself (h0), so it keeps one size
    assert rnn.hidden_sizes == {} and "batch_size is read outside get_inputs" in rnn.hidden_sizes_note
    assert all(c.family and c.lineage.startswith("kernelbench/L") for c in cards.values())
    # inputs that are not plain random tensors are read as draws plus steps, or as plain numbers
    refused = {q.origin: q.reason_code for q in cuda_l1.rejected}  # vanilla RNNs carry their hidden state
    assert refused == {"kernelbench L3/T33": "stateful_reference", "kernelbench L3/T34": "stateful_reference"}
    assert [i.post for i in cards["kernelbench_L1_014"].inputs] == [("triu",), ("triu",)]  # upper-triangular
    scalar = cards["kernelbench_L1_005"].inputs[1]  # a Python float among the inputs
    assert (scalar.dist, scalar.low, scalar.shape) == ("scalar", 3.14, ())
    assert all(c.init_inputs for c in cards.values())  # every ModelNew is built with its task's arguments
    lstm = cards["kernelbench_L3_035"]  # recurrent layers: shape from the layout rule, FLOPs unknown
    assert lstm.output_shape == (10, 10) and "cpu" not in lstm.public_sizes


# ---- KernelBench run folder -----------------------------------------------------------------

@pytest.fixture(scope="module")
def kernelbench() -> ImportBatch:
    return IMPORTERS["kernelbench"].import_path([FIXTURE])


def test_kernelbench_run_every_record_accounted(kernelbench: ImportBatch) -> None:
    kernels, evals = set(), set()
    for run in sorted((FIXTURE / "runs").iterdir()):
        kernels |= {(run.name, f.name) for f in run.glob("*_kernel.py")}
        for pid, v in json.loads((run / "eval_results.json").read_text()).items():
            for e in v if isinstance(v, list) else [v]:
                if isinstance(e.get("sample_id"), int):
                    evals.add((run.name, f"level_1_problem_{pid}_sample_{e['sample_id']}_kernel.py"))
    n_source = len(kernels | evals)
    assert n_source == 8
    assert kernelbench.n_records == n_source == len(kernelbench.attempts) + len(kernelbench.quarantined)
    reasons = collections.Counter(q.reason_code for q in kernelbench.quarantined)
    assert reasons == {"bad_filename": 1, "empty_source": 1, "unsupported_task": 1, "missing_source": 1}
    assert sorted(a.attempt_id for a in kernelbench.attempts) == [
        "kernelbench:demo_run:L1:P1:S0", "kernelbench:demo_run:L1:P1:S1", "kernelbench:demo_run:L1:P3:S0",
        "kernelbench:legacy_run:L1:P2:S0"]
    # P3's orthogonal matrix is no seeded draw: its own get_inputs makes it (in the sandbox, at its own size)
    assert [c.task_id for c in kernelbench.cards] == ["kernelbench_L1_001", "kernelbench_L1_002", "kernelbench_L1_003"]
    assert [c.inputs_from for c in kernelbench.cards] == ["", "", "task"]
    assert collections.Counter(r.reason_code for r in kernelbench.rejected) == {
        "bad_type": 1, "multi_output": 1}  # sample_id "zero"; P5 returns a pair
    _accounted(kernelbench)


def test_imported_cards_round_trip_through_the_catalogue(kernelbench: ImportBatch, tmp_path: Path) -> None:
    from grader.catalogue import load_catalogue
    from pipelines.importers import write_cards

    write_cards(kernelbench.cards, tmp_path / "cards.jsonl")
    loaded = load_catalogue(extra=[tmp_path / "cards.jsonl"])
    assert all(loaded[c.task_id].revision == c.revision for c in kernelbench.cards)


def test_kernelbench_run_mapping(kernelbench: ImportBatch) -> None:
    by_id = {a.attempt_id: a for a in kernelbench.attempts}
    cuda = by_id["kernelbench:demo_run:L1:P1:S1"]
    assert cuda.language == "cuda" and cuda.model == "tiny-coder-1b" and cuda.turn == 1
    assert cuda.extra["init_inputs"] == [32] and by_id["kernelbench:legacy_run:L1:P2:S0"].extra["init_inputs"] == [0.5]
    path = FIXTURE / "runs" / "demo_run" / "level_1_problem_1_sample_1_kernel.py"
    assert cuda.extra["original_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    claims = {c["attempt_id"]: c for c in kernelbench.claims}
    assert len(kernelbench.claims) == 5  # 1:[0, 1], 2:[0], 4:[0] in demo_run; 2 in legacy_run
    assert claims["kernelbench:demo_run:L1:P1:S0"]["runtime_ms"] == 0.0123
    assert claims["kernelbench:demo_run:L1:P1:S1"]["runtime_ms"] is None  # KernelBench's -1.0
    assert claims["kernelbench:demo_run:L1:P4:S0"]["attempt_admitted"] is False
    assert claims["kernelbench:legacy_run:L1:P2:S0"]["hardware"] == "NVIDIA L40S"
    softmax = next(c for c in kernelbench.cards if c.task_id == "kernelbench_L1_002")
    assert softmax.inputs[0].dist == "uniform" and softmax.public_sizes["cpu"] == ({"rows": 16, "cols": 64},)


def test_adapters_seed_identical_weights_and_match() -> None:
    ref_code = (FIXTURE / "KernelBench/level1/1_Scaled_residual_add.py").read_text()
    cand_code = (FIXTURE / "runs/demo_run/level_1_problem_1_sample_0_kernel.py").read_text()
    ref_ns: dict = {}
    cand_ns: dict = {}
    exec(compile(kernelbench_reference_source(ref_code, init_seed=7), "ref", "exec"), ref_ns)
    exec(compile(kernelbench_candidate_source(cand_code, [32], init_seed=7), "cand", "exec"), cand_ns)
    assert torch.equal(ref_ns["_kt_model"].w.float(), cand_ns["_kt_model"].w)  # seeded construction
    x = torch.randn(8, 32) * 3 + 1
    ref_out = ref_ns["run"](x.double())
    assert ref_out.dtype == torch.float64
    assert torch.allclose(cand_ns["run"](x), ref_out.float(), atol=1e-5, rtol=1e-5)
    other: dict = {}
    exec(compile(kernelbench_candidate_source(cand_code, [32], init_seed=8), "cand", "exec"), other)
    assert not torch.equal(other["_kt_model"].w, cand_ns["_kt_model"].w)  # the seed is what makes them equal
    with pytest.raises(ValueError):
        kernelbench_candidate_source(cand_code, [object()])


# ---- FlashInfer-Bench ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fib() -> ImportBatch:
    return IMPORTERS["flashinfer-bench"].import_path([FIB])


def _cardable(d: dict) -> bool:
    (out,) = d["outputs"].values() if len(d["outputs"]) == 1 else (None,)
    return (not d.get("constraints") and out is not None and out["dtype"] in ("float32", "float16", "bfloat16")
            and all(i["shape"] is not None and not i.get("optional")
                    and i["dtype"] in ("float32", "float16", "bfloat16", "int32", "int64")
                    for i in d["inputs"].values()))


@needs_data
def test_flashinfer_every_solution_accounted(fib: ImportBatch) -> None:
    defs = {json.loads(f.read_text())["name"]: json.loads(f.read_text()) for f in FIB.glob("definitions/*/*.json")}
    sols = [(f, json.loads(f.read_text())) for f in sorted(FIB.glob("solutions/*/*.json"))]
    traces = [line for f in FIB.glob("traces/*/*.jsonl") for line in f.read_text().splitlines() if line.strip()]
    gradable = [f for f, s in sols if _cardable(defs[s["definition"]])]
    assert (len(defs), len(sols), len(traces), len(gradable)) == (79, 102, 242, 48)
    assert fib.n_records == len(sols) == len(fib.attempts) + len(fib.quarantined)
    assert sorted(a.origin for a in fib.attempts) == sorted(map(str, gradable))
    assert {q.reason_code for q in fib.quarantined} == {"unsupported_task"}
    assert len(fib.cards) == sum(map(_cardable, defs.values())) == 30
    assert len(fib.cards) + len(fib.rejected) == len(defs)
    assert len(fib.claims) == len(traces)
    admitted = {a.attempt_id for a in fib.attempts}
    assert all(c["attempt_admitted"] == (c["attempt_id"] in admitted) for c in fib.claims)
    _accounted(fib)


@needs_data
def test_flashinfer_mapping(fib: ImportBatch) -> None:
    a = next(a for a in fib.attempts if a.extra["solution_name"] == "gpt-5_gemm_n4096_k14336_cuda_optimized_r8_c0_high")
    src = next(FIB.glob("solutions/*/gpt-5_gemm_n4096_k14336_cuda_optimized_r8_c0_high.json"))
    sol = json.loads(src.read_text())
    assert (a.model, a.turn, a.extra["candidate"], a.extra["name_suffix"]) == ("gpt-5", 8, 0, "high")
    assert a.trajectory_id == f"flashinfer:{src.parent.name}:gpt-5:gemm_n4096_k14336"
    assert a.language == "cuda" and a.entry_point == "run" and a.task_id == "flashinfer_gemm_n4096_k14336"
    assert a.extra["original_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert a.extra["destination_passing_style"] == sol["spec"].get("destination_passing_style", True)
    compile(a.source, "candidate", "exec")
    assert all(s["content"] in a.source or repr(s["content"])[1:-1] in a.source for s in sol["sources"])
    # a trajectory holds the rounds of one run: gpt-5's gemm_n4096_k14336 kept rounds 4, 8 and 10
    turns = sorted(x.turn for x in fib.attempts if x.trajectory_id == a.trajectory_id)
    assert turns == [4, 8, 10]
    rms = next(x for x in fib.attempts if x.extra["solution_name"] == "gpt-5.2_rmsnorm_h4096_cuda_optimized_r1_c0_high"
               and "142116" in x.extra["run"])
    passed = [c["claimed_speedup"] for c in fib.claims if c["attempt_id"] == rms.attempt_id]
    assert len(passed) == 14 and rms.claimed_speedup == pytest.approx(math.exp(sum(map(math.log, passed)) / 14))


@needs_data
def test_flashinfer_cards_sizes(fib: ImportBatch) -> None:
    cards = {c.task_id: c for c in fib.cards}
    gemm = cards["flashinfer_gemm_n128_k2048"]
    observed = {json.loads(line)["workload"]["axes"]["M"]
                for line in next(FIB.glob("traces/*/gemm_n128_k2048.jsonl")).read_text().splitlines()}
    public = [s["M"] for s in gemm.public_sizes["gpu"]]
    hidden = [s["M"] for s in gemm.hidden_sizes["gpu"]]
    assert set(public) <= observed and min(public) == min(observed) and max(public) == max(observed)
    assert len(hidden) == 2 and not set(hidden) & set(public)
    assert all(s["N"] == 128 and s["K"] == 2048 for p in gemm.public_sizes.values() for s in p)
    again = IMPORTERS["flashinfer-bench"].import_path([FIB])
    assert [c.revision for c in again.cards] == [c.revision for c in fib.cards]  # deterministic draws
    from grader.catalogue import card_from_dict
    assert all(card_from_dict(json.loads(json.dumps(dataclasses.asdict(c)))).revision == c.revision
               for c in fib.cards)
    ref_ns: dict = {}
    exec(compile(cards["flashinfer_rmsnorm_h4096"].reference, "ref", "exec"), ref_ns)
    x, w = torch.randn(3, 4096, dtype=torch.float64), torch.randn(4096, dtype=torch.float64)
    assert torch.allclose(ref_ns["run"](x, w), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w)


# ---- export to FlashInfer-Bench traces ------------------------------------------------------

def _graded(status: Status, sizes: list[SizeResult], code: Reason, reason: str = "graded") -> dict:
    r = GradeResult(attempt_id="kt-1", task_id="flashinfer_gemm_n128_k2048", task_revision="r", grader_version="0.3.0",
                    status=status, reason_code=code, reason=reason,
                    reward=reward(status, [s.speedup for s in sizes if s.speedup]),
                    seed=3, profile="gpu", device="NVIDIA H200", fingerprint_id="fp1",
                    fingerprint={"gpu_name": "NVIDIA H200", "driver": "580.1"}, sizes=sizes)
    return json.loads(r.to_json())


@needs_data
def test_export_traces_validate_with_flashinfer_bench_schema(fib: ImportBatch) -> None:
    fbdata = pytest.importorskip("flashinfer_bench.data", reason="pip install --no-deps flashinfer-bench safetensors")
    card = next(c for c in fib.cards if c.task_id == "flashinfer_gemm_n128_k2048")
    pub = [size_key(s) for s in card.public_sizes["gpu"][:2]]
    records = [
        _graded(Status.CORRECT, [SizeResult(pub[0], False, 0.02, 0.03, speedup=1.5, max_rel_err=0.2),
                                 SizeResult(pub[1], False, 0.05, 0.04, speedup=0.8, max_rel_err=0.4),
                                 SizeResult(size_key(card.hidden_sizes["gpu"][0]), True, 0.1, 0.1, speedup=1.0)],
                Reason.OK),
        _graded(Status.WRONG_OUTPUT, [], Reason.BAD_OUTPUT, "output shape (4, 8) != (4, 128)"),
        _graded(Status.CHEAT_FLAGGED, [], Reason.TIMED_OUTPUT_MISMATCH, "timed outputs differ"),
        _graded(Status.COMPILE_ERROR, [], Reason.COMPILE), _graded(Status.TIMEOUT, [], Reason.TIMEOUT),
        _graded(Status.INFRA_ERROR, [], Reason.INFRA, "GPU fell off the bus"),
    ]
    buf = io.StringIO()
    report = export_traces(records, buf, {card.task_id: card}, exported_at="2026-03-17T00:00:00+00:00")
    lines = buf.getvalue().splitlines()
    assert (report.n_records, report.n_traces, len(lines)) == (6, 6, 6)  # 2 public sizes + 4 failures
    assert [a for a, _ in report.skipped] == ["kt-1"]  # the infra_error record
    traces = [fbdata.Trace.model_validate_json(line) for line in lines]  # their validators, their enums
    assert [t.evaluation.status.value for t in traces] == [
        "PASSED", "PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "COMPILE_ERROR", "TIMEOUT"]
    assert traces[0].definition == "gemm_n128_k2048" and traces[0].workload.axes == {"M": parse_size_key(pub[0])["M"]}
    assert traces[1].evaluation.performance.speedup_factor == pytest.approx(0.8)
    assert traces[3].evaluation.correctness.extra["kerneltraj_status"] == "cheat_flagged"
    hidden_m = card.hidden_sizes["gpu"][0]["M"]
    assert all(t.workload.axes.get("M") != hidden_m for t in traces)  # hidden sizes never exported
    broken = json.loads(lines[0])
    del broken["evaluation"]["performance"]  # their cross-field rule: PASSED needs performance
    with pytest.raises(ValueError):
        fbdata.Trace.model_validate_json(json.dumps(broken))


# ---- adapters on a real GPU (compile through torch's extension loader) ------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU and nvcc")

_FIB_DEF = {"name": "scaled_rows_h64", "op_type": "rmsnorm", "description": "y = x * w (tiny, our own)",
            "axes": {"batch_size": {"type": "var"}, "hidden_size": {"type": "const", "value": 64}},
            "inputs": {"x": {"shape": ["batch_size", "hidden_size"], "dtype": "float32"},
                       "w": {"shape": ["hidden_size"], "dtype": "float32"}},
            "outputs": {"y": {"shape": ["batch_size", "hidden_size"], "dtype": "float32"}},
            "reference": "import torch\n\ndef run(x, w):\n    return x * w\n"}
_FIB_KERNEL = r"""
#include "kernel.h"
__global__ void scale_rows(const float* x, const float* w, float* y, int n, int h) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * w[i % h];
}
void launch(const float* x, const float* w, float* y, int n, int h) {
    scale_rows<<<(n + 127) / 128, 128>>>(x, w, y, n, h);
}
"""
_FIB_MAIN = {
    True: "#include <torch/extension.h>\n#include \"kernel.h\"\n"
          "void run(torch::Tensor x, torch::Tensor w, torch::Tensor y) {\n"
          "  launch(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), x.numel(), w.numel());\n}\n"
          "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run); }\n",
    False: "#include <torch/extension.h>\n#include \"kernel.h\"\n"
           "torch::Tensor run(torch::Tensor x, torch::Tensor w) {\n  auto y = torch::empty_like(x);\n"
           "  launch(x.data_ptr<float>(), w.data_ptr<float>(), y.data_ptr<float>(), x.numel(), w.numel());\n"
           "  return y;\n}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"run\", &run); }\n",
}


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dps", [True, False])
def test_flashinfer_adapter_compiles_and_matches_on_gpu(dps: bool) -> None:
    from pipelines.importers import flashinfer

    d = flashinfer.parse_definition(json.dumps(_FIB_DEF).encode(), "test/def.json")
    card = flashinfer.make_card(d)
    solution = {"name": f"us_scaled_rows_h64_cuda_r2_c{int(dps)}", "definition": d.name, "author": "us",
                "spec": {"language": "cuda", "target_hardware": ["H200"], "entry_point": "main.cpp::run",
                         "binding": "torch", "destination_passing_style": dps},
                "sources": [{"path": "kernel.h",
                             "content": "void launch(const float*, const float*, float*, int, int);"},
                            {"path": "kernel.cu", "content": _FIB_KERNEL},
                            {"path": "main.cpp", "content": _FIB_MAIN[dps]}]}
    att = flashinfer.parse_solution(json.dumps(solution).encode(), "test/sol.json", "run", {d.name: d},
                                    {d.name: card}, {}, set())
    assert isinstance(att, RawAttempt), att
    cand: dict = {}
    ref: dict = {}
    exec(compile(att.source, "candidate", "exec"), cand)
    exec(compile(card.reference, "reference", "exec"), ref)
    for size in card.public_sizes["gpu"][:2] + card.hidden_sizes["gpu"][:1]:
        x = torch.randn(size["batch_size"], 64, device="cuda") + 0.5
        w = torch.randn(64, device="cuda") * 2
        out = cand["run"](x, w)
        assert out.shape == (size["batch_size"], 64) and not out.isnan().any()
        assert torch.allclose(out.double(), ref["run"](x.double(), w.double()), atol=1e-6, rtol=1e-6)


@pytest.mark.gpu
@needs_cuda
def test_kernelbench_adapter_compiles_cuda_candidate_on_gpu() -> None:
    ref_code = (FIXTURE / "KernelBench/level1/1_Scaled_residual_add.py").read_text()
    cand_code = (FIXTURE / "runs/demo_run/level_1_problem_1_sample_1_kernel.py").read_text()
    cand: dict = {}
    ref: dict = {}
    exec(compile(kernelbench_candidate_source(cand_code, [32]), "candidate", "exec"), cand)
    exec(compile(kernelbench_reference_source(ref_code), "reference", "exec"), ref)
    x = torch.randn(8, 32, device="cuda") * 2 - 1
    out = cand["run"](x)
    assert out.device.type == "cuda" and cand["_kt_model"].w.device.type == "cuda"
    assert torch.allclose(out.double(), ref["run"](x.double()), atol=1e-5, rtol=1e-5)


# ---- problems a user can fix, reported as such ------------------------------------------------

def _definition(out_dtype: str) -> dict:
    return {"name": "toy_op", "op_type": "norm", "axes": {"N": {"type": "var"}, "D": {"type": "const", "value": 8}},
            "inputs": {"x": {"shape": ["N", "D"], "dtype": "float32"}},
            "outputs": {"y": {"shape": ["N", "D"], "dtype": out_dtype}}, "reference": "def run(x):\n    return x\n"}


@pytest.mark.parametrize("dtype,code", [("int32", "integer_output"), ("bool", "integer_output"),
                                        ("float8_e4m3fn", "unsupported_dtype"), ("complex64", "unsupported_dtype"),
                                        ("float16", None)])
def test_flashinfer_output_dtype_is_named_for_what_it_is(dtype: str, code: str | None) -> None:
    """From the release issue: an unknown output dtype was reported as `integer_output`."""
    from pipelines.importers import flashinfer

    d = flashinfer.parse_definition(json.dumps(_definition(dtype)).encode(), "defs/toy_op.json")
    problem = flashinfer.card_problem(d)
    assert (problem.code if problem else None) == code
    if problem:
        assert dtype in problem.reason


def _refuse_every_task(jobs: dict) -> dict:
    """Probe stand-in: no cards, so the rows stay cheap and still carry their ids and claims."""
    from pipelines.importers import TaskReject

    return {k: TaskReject("probe_failed", "stub probe") for k in jobs}


def test_cuda_l1_gpu_comes_from_the_row_when_it_has_one(tmp_path: Path) -> None:
    """From the release issue: the GPU name was taken from the file name even when the row said it."""
    base = {"level_id": 1, "task_id": 7, "ref_code": "import torch\n", "custom_code": "x = 1\n", "score_default": 1.5}
    rows = [{**base, "gpu": "L40S"}, {**base, "task_id": 8}, {**base, "task_id": 9, "gpu": 40}]
    f = tmp_path / "export.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    batch = IMPORTERS["cuda-l1"].import_path([f], probe=_refuse_every_task)
    by_line = {q.origin.rsplit(":", 1)[1]: q for q in batch.quarantined}
    assert by_line["1"].attempt_id == "cuda-l1:l40s:L1:T7"  # the row's own GPU
    assert by_line["2"].attempt_id == "cuda-l1:export:L1:T8"  # none in the row: the file name's
    assert by_line["3"].reason_code == "bad_type" and "gpu" in by_line["3"].reason
    assert {c["gpu"] for c in batch.claims} == {"l40s", "export"}


@needs_root
def test_importer_probe_runs_a_hostile_reference_only_in_the_sandbox(tmp_path, listener, monkeypatch):  # noqa: F811
    from pipelines.importers import kernelbench as kb

    monkeypatch.setenv("HF_TOKEN", "hf_secret_of_the_host")
    marker = tmp_path / "leaked"
    code = hostile_module_level(str(marker), listener.port) + (
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
        "def get_inputs():\n"
        "    return [torch.randn(4, 8)]\n"
        "def get_init_inputs():\n"
        "    return []\n")
    got = kb.probe_outputs({"hostile": (code, [{"shape": [4, 8], "dtype": "float32", "dist": "normal",
                                                 "mean": [-1.0, 1.0], "std": [0.5, 2.0], "low": 0.0, "high": 1.0}])})
    assert got["hostile"] == kb.ProbeResult((4, 8), "float32", 0, "[]"), got  # it ran, in the sandbox
    assert not marker.exists(), "the reference wrote a file on the host"
    assert listener.accepted == 0, "the reference reached a host socket"


def test_wrongly_typed_eval_fields_are_named_never_silently_null(tmp_path: Path) -> None:
    """From the release issue: wrongly typed `eval_results` fields became null silently. Each is kept as null
    and named (record and field) in the claim and in the batch's problems, which `kerneltraj import` prints."""
    from pipelines.importers import kernelbench as kb

    run = tmp_path / "run"
    run.mkdir()
    good = {"sample_id": 0, "compiled": True, "correctness": True, "runtime": 0.5, "metadata": {"hardware": "H200"},
            "runtime_stats": {"mean": 0.5, "num_trials": 100}}
    bad = {"sample_id": 1, "compiled": "yes", "correctness": 1, "runtime": "0.5", "metadata": ["H200"],
           "runtime_stats": {"mean": 0.5, "trials": [1, 2]}}
    untimed = {**good, "sample_id": 2, "correctness": False, "runtime": -1.0, "runtime_stats": "n/a"}
    (run / "eval_results.json").write_text(json.dumps({"3": [good, bad, untimed]}))
    (run / "generation_config.yaml").write_text("level: 1\n")
    batch = kb.import_path([run], probe=_refuse_every_task)
    claims = {c["origin"].rsplit("[", 1)[1]: c for c in batch.claims}
    assert "unreadable_fields" not in claims["0]"] and claims["0]"]["runtime_ms"] == 0.5
    named = claims["1]"]["unreadable_fields"]
    assert set(named) == {"compiled", "correctness", "runtime", "metadata", "runtime_stats.trials"}
    assert named["runtime"] == 'is "0.5" (str), not a positive number of ms (or -1: not timed)'
    assert (claims["1]"]["compiled"], claims["1]"]["runtime_ms"], claims["1]"]["runtime_stats"]) == (None, None,
                                                                                                     {"mean": 0.5})
    assert claims["2]"]["unreadable_fields"] == {"runtime_stats": 'is "n/a" (str), not an object'}  # -1: not timed
    assert sorted((p.origin.rsplit("#", 1)[1], p.field) for p in batch.problems) == sorted(
        [("3[1]", f) for f in named] + [("3[2]", "runtime_stats")])


def test_wrongly_typed_claims_of_cuda_l1_and_flashinfer_are_named(tmp_path: Path) -> None:
    from pipelines.importers import flashinfer

    base = {"level_id": 1, "task_id": 7, "ref_code": "import torch\n", "custom_code": "x = 1\n"}
    f = tmp_path / "h100.jsonl"
    f.write_text(json.dumps({**base, "score_default": "2.5", "score_cudnn": [3], "score_cuda_graph": -1}) + "\n")
    batch = IMPORTERS["cuda-l1"].import_path([f], probe=_refuse_every_task)
    by = {c["baseline"]: c for c in batch.claims}
    assert by["default"]["claimed_speedup"] == 2.5 and "unreadable_fields" not in by["default"]  # a numeric text
    assert {(p.origin, p.field) for p in batch.problems} == {(f"{f}:1", "score_cudnn"), (f"{f}:1", "score_cuda_graph")}
    assert by["cudnn"]["unreadable_fields"] == {"score_cudnn": "is [3] (list), not a positive speedup"}

    trace = {"definition": "gemm_n8_k16", "workload": {"axes": {"M": 4}, "uuid": "u"}, "solution": "s1",
             "evaluation": {"status": "PASSED", "correctness": "exact",
                            "performance": {"latency_ms": "0.1", "reference_latency_ms": 0.2, "speedup_factor": None}}}
    claim, _ = flashinfer.parse_trace(json.dumps(trace).encode(), "t.jsonl:1", "run")
    assert claim["unreadable_fields"] == {"evaluation.correctness": 'is "exact" (str), not an object',
                                          "evaluation.performance.latency_ms": 'is "0.1" (str), not a finite number'}
    assert claim["latency_ms"] is None and claim["reference_latency_ms"] == 0.2 and claim["claimed_speedup"] is None


@pytest.mark.skipif(not (KERNELBENCH_DATA / "level1").is_dir(), reason="../shared/data/kernelbench is not here")
def test_a_kernelbench_problems_folder_alone_gives_cards_and_its_task_files_are_never_attempts(tmp_path: Path) -> None:
    """A problems folder given alone is read as what it is: every task in it becomes a card (or a refusal
    with its reason), and task files whose names end in `_kernel.py` are tasks, not misnamed attempts."""
    level1 = tmp_path / "kernelbench" / "level1"
    level1.mkdir(parents=True)
    for name in ("19_ReLU.py", "50_conv_standard_2D__square_input__square_kernel.py"):
        (level1 / name).write_bytes((KERNELBENCH_DATA / "level1" / name).read_bytes())
    batch = IMPORTERS["kernelbench"].import_path([tmp_path / "kernelbench"])
    assert batch.attempts == [] and batch.quarantined == [], [q.reason_code for q in batch.quarantined]
    cards, refused = {c.task_id for c in batch.cards}, {q.origin: q.reason_code for q in batch.rejected}
    assert "kernelbench_L1_019" in cards, (cards, refused)
    assert "kernelbench_L1_050" in cards or "kernelbench L1/P50" in refused, (cards, refused)
    assert len(cards) + len(refused) == 2


def test_module_constants_built_with_shifts_fold_and_hostile_shifts_do_not() -> None:
    from pipelines.importers.kernelbench import analyse_module

    code = ("import torch\nROWS = 1 << 4\nCOLS = (1 << 18) >> 2\nclass Model(torch.nn.Module):\n"
            "    def forward(self, x):\n        return x\n"
            "def get_inputs():\n    return [torch.randn(ROWS, COLS)]\ndef get_init_inputs():\n    return []\n")
    shape = analyse_module(code)
    assert shape.size == {"ROWS": 16, "COLS": 65536}, shape.size
    # a shift past 62 bits is not computed here: the task is left to its own get_inputs, in the sandbox
    hostile = analyse_module(code.replace("1 << 4", "1 << 4000"))
    assert "'ROWS' does not fold" in hostile.own_inputs and hostile.size == {} and hostile.inputs == ()


_EVERY_STEP_TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Masked, scaled sums of symmetric, triangular and normalised inputs (every input step we express)."""

    def __init__(self, alpha, shift):
        super().__init__()
        self.alpha, self.shift = alpha, shift

    def forward(self, a, u, low, p, mask, sign, s):
        return (a @ u + low * s).sum(-1) * self.alpha + (p * mask).sum(-1) + sign + self.shift


N = 16


def get_inputs():
    a = torch.rand(N, N)
    a = (a + a.T) / 2
    scale = torch.rand(())
    u = torch.triu(torch.randn(N, N))
    low = torch.randn(N, N).tril()
    p = (torch.rand(N, N) * scale).softmax(dim=-1)
    mask = torch.randint(0, 2, p.shape).bool()
    s = 0.5
    return [a, u, low, p, mask, torch.randint(0, 2, (N,)).float() * 2 - 1, s]


def get_init_inputs():
    return [2.0, 3.0]
'''

_EVERY_STEP_HONEST = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, alpha, shift):
        super().__init__()
        self.alpha, self.shift = alpha, shift

    def forward(self, a, u, low, p, mask, sign, s):
        rows = torch.einsum("ij,jk->i", a, u) + low.sum(-1) * s
        return rows * self.alpha + torch.where(mask, p, torch.zeros_like(p)).sum(-1) + sign + self.shift
'''


@pytest.mark.slow
def test_task_files_that_shape_their_inputs_become_cards_and_grade_modelnew_with_their_init_inputs(tmp_path: Path):
    """Symmetric, triangular, softmax-normalised and randomly scaled tensors, a boolean mask, a {-1, 1} vector
    and a plain number: each is read as a seeded draw plus steps, drawn alike on both sides, and a `ModelNew`
    that defines neither get_inputs nor get_init_inputs grades, built with the task's constructor arguments."""
    import subprocess
    import sys

    from grader.inputs import make_inputs, resolve_specs

    level1 = tmp_path / "problems" / "level1"
    level1.mkdir(parents=True)
    (level1 / "1_every_step.py").write_text(_EVERY_STEP_TASK)
    batch = IMPORTERS["kernelbench"].import_path([tmp_path / "problems"])
    assert batch.rejected == [], [(q.reason_code, q.reason) for q in batch.rejected]
    (card,) = batch.cards
    steps = {s.name: (s.dtype, s.dist, s.post) for s in card.inputs}
    assert steps == {"a": ("float32", "uniform", ("sym",)), "u": ("float32", "normal", ("triu",)),
                     "low": ("float32", "normal", ("tril",)),
                     "p": ("float32", "uniform", ("scale:0.0:1.0", "softmax:-1")),
                     "mask": ("bool", "randint", ()), "in5": ("float32", "randint", ("affine:2.0:-1.0",)),
                     "s": ("float32", "scalar", ())}, steps
    assert card.init_inputs == "[2.0, 3.0]" and "cpu" in card.public_sizes
    a, u, low, p, mask, sign, s = make_inputs(resolve_specs(card, card.public_sizes["cpu"][0]), 7, "cpu")
    assert torch.equal(a, a.T) and torch.equal(u, u.triu()) and torch.equal(low, low.tril())
    assert torch.allclose(p.sum(-1), torch.ones(16)) and mask.dtype == torch.bool and 0 < mask.sum() < mask.numel()
    assert set(sign.tolist()) == {-1.0, 1.0} and s == 0.5 and type(s) is float

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(dataclasses.asdict(card), default=list) + "\n")
    wrong = _EVERY_STEP_HONEST.replace("torch.where(mask, p, torch.zeros_like(p))", "p")  # ignores the mask
    reqs = [{"attempt_id": name, "task_id": card.task_id, "source": src, "language": "pytorch",
             "entry_point": "ModelNew", "profile": "cpu"} for name, src in (("honest", _EVERY_STEP_HONEST),
                                                                            ("wrong", wrong))]
    (tmp_path / "req.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    proc = subprocess.run([sys.executable, "-m", "grader", "grade", "--in", str(tmp_path / "req.jsonl"), "--out",
                           str(tmp_path / "out.jsonl"), "--device", "cpu", "--catalogue-extra", str(tasks)],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {r["attempt_id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert results["honest"]["status"] == "correct", results["honest"]["reason"]
    assert results["wrong"]["status"] == "wrong_output", results["wrong"]["reason"]


def test_a_reference_that_keeps_state_between_calls_is_refused_with_the_attribute_named() -> None:
    """Its answer depends on how often it was called before, and a grade calls a candidate many more times
    than the reference: no honest candidate could pass (CUDA-L1 L3:T34 on the H200)."""
    from pipelines.importers import TaskReject
    from pipelines.importers.kernelbench import analyse_module

    code = ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.h = torch.zeros(4)\n    def forward(self, x):\n        self.h = torch.tanh(x + self.h)\n"
            "        return self.h\nB = 4\ndef get_inputs():\n    return [torch.randn(B)]\n"
            "def get_init_inputs():\n    return []\n")
    with pytest.raises(TaskReject, match="assigns self.h") as refused:
        analyse_module(code)
    assert refused.value.code == "stateful_reference"
    for stateless in ("return torch.tanh(x + self.h)", "self.h = self.h.to(x.device)\n        return x + self.h"):
        assert analyse_module(code.replace("self.h = torch.tanh(x + self.h)\n        return self.h",
                                           stateless)).size == {"B": 4}
