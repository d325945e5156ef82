"""Property-based fuzzing of every record parser: hostile input never escapes as an exception.

Each hypothesis example is a *batch* of records (a kind and a seed per record; the seed drives a
plain `random.Random` that builds the bytes), so ten thousand records per format cost a few
hundred examples. Properties checked on every batch:
- no exception escapes the parser;
- every record ends as exactly one accepted row or one quarantined row (counts conserved);
- every quarantined row has a non-empty reason code and reason;
- accepted rows obey the contract (ids fullmatch the id pattern, sources are valid UTF-8 without
  NUL and within the size limit, text fields are encodable, ids are unique).
"""
from __future__ import annotations

import json
import random
import re
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from grader.contract import MAX_SOURCE_BYTES
from pipelines.importers import cuda_l1, flashinfer
from pipelines.importers import kernelbench as kb
from pipelines.core.rawattempt import _ID, MAX_LINE_BYTES, Quarantined, RawAttempt, parse_lines

pytestmark = pytest.mark.fuzz

BATCH = 60
EXAMPLES = 170  # 170 x 60 = 10,200 records per format
MIN_RECORDS = 10_000
# No shrinking: a 60-record batch shrinks for minutes; the failing batch and traceback are reported as is.
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                phases=(Phase.explicit, Phase.generate), suppress_health_check=list(HealthCheck))
COUNTS: dict[str, int] = {}

# ---- hostile building blocks ---------------------------------------------------------------

_TRAVERSAL = ["../../etc/passwd", "/etc/passwd", "a/../../b", "..", "./x", "C:\\Windows\\x", "a\\..\\b",
              "~root/.ssh", "%2e%2e%2fx", "\u2025/x", "a\nb", "abc\n", "a\rb", " lead", "x" * 300, "",
              "ok-id/../../up", "kernel/../../../x.cu", "a//b", "ＡＢＣ"]


def _hostile_str(rng: random.Random) -> str:
    k = rng.randrange(9)
    if k == 0:
        return "x" * rng.choice([1000, 300_000, MAX_SOURCE_BYTES + 1])
    if k == 1:
        return "code\x00with NUL"
    if k == 2:
        return "lone \ud800 surrogate" if rng.random() < 0.5 else "\udfff"
    if k == 3:
        return rng.choice(_TRAVERSAL)
    if k == 4:
        return "é☃😀\u202e" * rng.randrange(1, 50)
    if k == 5:
        return " \t\n "
    if k == 6:
        return "None"
    return "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(1, 40)))


def _hostile_value(rng: random.Random) -> Any:
    k = rng.randrange(12)
    return [None, True, False, 0, -1, 10**30, 1.5, "__NAN__", "__INF__", [], {}, "__DEEP__", "__BIGINT__",
            [1, [2, [3]]], {"$ref": "#"}, _hostile_str(rng)][k if k < 11 else rng.randrange(11, 16)]


def _dump(obj: Any, rng: random.Random) -> bytes:
    """JSON with placeholders swapped for text json.dumps cannot produce (deep nesting, huge ints)."""
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    deep = rng.choice([50, 3000, 100_000])
    text = (text.replace('"__DEEP__"', "[" * deep + "]" * deep).replace('"__BIGINT__"', "1" * 5000)
            .replace('"__NAN__"', "NaN").replace('"__INF__"', "-Infinity"))
    return text.encode("utf-8", "surrogatepass")


def _garbage(rng: random.Random, valid: bytes) -> bytes:
    k = rng.randrange(8)
    if k == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if k == 1:
        return b"\xff\xfe" + valid
    if k == 2:
        return valid[: rng.randrange(1, max(2, len(valid)))]
    if k == 3:
        return rng.choice([b"[]", b"null", b"42", b'"string"', b"true", b"{}", b"[{}]", b"NaN"])
    if k == 4:
        return b"\xef\xbb\xbf" + valid  # UTF-8 byte-order mark
    if k == 5:
        return b"[" * 100_000
    if k == 6:
        return b'{"a": ' + b"1" * 5000 + b"}"
    return b"x" * (MAX_LINE_BYTES + 1) if rng.random() < 0.05 else b"{" + valid


def _mutate(obj: dict[str, Any], rng: random.Random, keys: list[str]) -> bytes:
    obj = dict(obj)
    for _ in range(rng.randrange(1, 4)):
        op, key = rng.randrange(5), rng.choice(keys)
        if op == 0:
            obj.pop(key, None)
        elif op == 1:
            obj[key] = _hostile_value(rng)
        elif op == 2:
            obj[key] = _hostile_str(rng)
        elif op == 3:
            obj[_hostile_str(rng)[:50]] = _hostile_value(rng)
        else:
            obj["extra"] = rng.choice([[1, 2], "ab", 7, {"nested": "__DEEP__"}, None, {"k": _hostile_str(rng)}])
    return _dump(obj, rng)


KINDS = ["valid", "mutated", "mutated", "mutated", "garbage", "duplicate", "blank"]
batches = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 2**32 - 1)), min_size=BATCH, max_size=BATCH)


def _lines(batch: list[tuple[str, int]], valid: Callable[[random.Random], dict], keys: list[str]) -> list[bytes]:
    out: list[bytes] = []
    for kind, seed in batch:
        rng = random.Random(seed)
        good = valid(rng)
        if kind == "valid":
            out.append(_dump(good, rng))
        elif kind == "mutated":
            out.append(_mutate(good, rng, keys))
        elif kind == "garbage":
            out.append(_garbage(rng, _dump(good, rng)))
        elif kind == "duplicate" and out:
            out.append(rng.choice(out))
        else:
            out.append(rng.choice([b"", b"   ", b"\t"]))
    return out


def _check(results: list, n_records: int) -> None:
    assert len(results) == n_records, "a record was dropped or doubled"
    ids = []
    for r in results:
        assert isinstance(r, (RawAttempt, Quarantined)), type(r)
        if isinstance(r, Quarantined):
            assert isinstance(r.reason_code, str) and r.reason_code and r.reason, r
            continue
        ids.append(r.attempt_id)
        for k in ("attempt_id", "task_id", "trajectory_id"):
            assert re.fullmatch(_ID.pattern.strip("^$"), getattr(r, k)) and ".." not in getattr(r, k), (k, r)
        assert "\x00" not in r.source and len(r.source.encode("utf-8")) <= MAX_SOURCE_BYTES
        for k in ("agent", "model", "language", "entry_point"):
            v = getattr(r, k)
            v.encode("utf-8")  # a lone surrogate here could never be written to parquet or DuckDB
            assert "\x00" not in v, (k, r)
    assert len(ids) == len(set(ids)), "duplicate ids admitted"


def _count(name: str, n: int) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + n


def _report(name: str) -> None:
    print(f"fuzz records {name}: {COUNTS[name]}")  # shown with `pytest -s`
    assert COUNTS[name] >= MIN_RECORDS


# ---- our own JSONL: pipelines.core.rawattempt.parse_lines ------------------------------------------

_OWN_KEYS = ["attempt_id", "task_id", "agent", "model", "trajectory_id", "turn", "language", "source",
             "entry_point", "generation_tokens", "started_at", "claimed_speedup", "extra"]


def _own(rng: random.Random) -> dict:
    n = rng.randrange(50)
    return {"attempt_id": f"a-{n}", "task_id": "softmax_rows_fp32", "agent": "kestrel", "model": "m",
            "trajectory_id": f"t-{n % 7}", "turn": 1 + n % 5, "language": "triton",
            "source": "def run(x):\n    return x\n", "started_at": "2026-03-17T14:00:00Z", "claimed_speedup": 1.5}


def test_fuzz_parse_lines() -> None:
    @FUZZ
    @given(batches)
    def run(batch: list[tuple[str, int]]) -> None:
        lines = _lines(batch, _own, _OWN_KEYS)
        results = list(parse_lines(lines, "fuzz.jsonl"))
        _check(results, sum(1 for x in lines if x.strip()))
        _count("kerneltraj", len(batch))

    run()
    _report("kerneltraj")


# ---- CUDA-L1 rows ------------------------------------------------------------------------------

_MODULE = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return torch.relu(x) * self.k

n = {n}
def get_inputs():
    return [torch.randn(n, {m})]

def get_init_inputs():
    return [2]
"""
_HOSTILE_REFS = [
    "(" * 5000, "n = " + "1+" * 30000 + "1\n" + _MODULE.format(n="n", m=4),
    "n = 10**10**10\n" + _MODULE.format(n="n", m=4),
    _MODULE.format(n="(1,) * 10**9", m=4), _MODULE.format(n="2**62", m="2**62"), _MODULE.format(n="-3", m=4),
    _MODULE.format(n="'a' * 64 * 64 * 64", m=4), _MODULE.format(n="4", m="n[0]"), "class Model: pass\n\x00",
    _MODULE.format(n=4, m=4).replace("torch.randn(n, 4)", "torch.randn(n, 4).abs()"), "\ud800",
    _MODULE.format(n=4, m=4).replace("return [torch.randn", "while True: pass\n    return [torch.randn"),
]
_L1_KEYS = ["level_id", "task_id", "ref_code", "custom_code", "score_default", "score_cudnn"]


def _l1(rng: random.Random) -> dict:
    ref = (_MODULE.format(n=rng.choice([4, 8]), m=rng.choice([4, 16])) if rng.random() < 0.8
           else rng.choice(_HOSTILE_REFS))
    code = rng.choice(["class ModelNew: pass\n", "import torch\nfrom torch.utils.cpp_extension import load_inline\n",
                       None, "", "None", _hostile_str(rng)])
    return {"level_id": rng.randrange(1, 4), "task_id": rng.randrange(1, 40), "ref_code": ref, "custom_code": code,
            "score_default": rng.choice([1.5, "2.75", None, -1, "fast", 1e308, "inf"]),
            "score_cudnn": rng.choice([1.1, None])}


def _stub_probe(jobs: dict) -> dict:
    return {k: kb.ProbeResult((4, 4), "float32", 128) for k in jobs}


def test_fuzz_cuda_l1_rows() -> None:
    @FUZZ
    @given(batches)
    def run(batch: list[tuple[str, int]]) -> None:
        lines = _lines(batch, _l1, _L1_KEYS)
        reader = cuda_l1.Reader(probe=_stub_probe)
        results, claims = reader.read_lines(enumerate(lines, 1), "fuzz/h100.jsonl", "h100")
        _check(results, sum(1 for x in lines if x.strip()))
        assert all(c["claimed_speedup"] is None or c["claimed_speedup"] > 0 for c in claims)
        _count("cuda-l1", len(batch))

    run()
    _report("cuda-l1")


# ---- KernelBench run folders ------------------------------------------------------------------

def _run_folder(batch: list[tuple[str, int]]) -> tuple[kb.RunFolder, int]:
    """An in-memory run folder: about half the records are kernel files, half eval entries."""
    files: dict[str, bytes] = {}
    evals: dict[str, Any] = {}
    n_entries = 0
    for kind, seed in batch:
        rng = random.Random(seed)
        p, s = rng.randrange(1, 60), rng.randrange(0, 25)  # wide enough that few file names collide
        if rng.random() < 0.5:
            name = f"level_1_problem_{p}_sample_{s}_kernel.py"
            if kind in ("mutated", "garbage"):
                name = rng.choice([f"level_1_problem_{p}_kernel.py", f"../{name}", f"level_x_problem_{p}_kernel.py",
                                   f"level_1_problem_{10**9}_sample_0_kernel.py", "_kernel.py", name])
            files[name] = (b"x" * (4 * MAX_SOURCE_BYTES + 1) if rng.random() < 0.03 else rng.choice(
                [b"class ModelNew: pass\n", b"", b"\xff\xfe\x00", _hostile_str(rng).encode("utf-8", "surrogatepass")]))
        else:
            entry = {"sample_id": s, "compiled": True, "correctness": rng.random() < 0.5,
                     "runtime": rng.choice([0.01, -1.0, "__NAN__", None]), "runtime_stats": {"hardware": "H"}}
            if kind in ("mutated", "garbage"):
                entry[rng.choice(list(entry))] = _hostile_value(rng)
            key = rng.choice([str(p), str(p), "x", "-1", "١", "99999999"])
            evals.setdefault(key, []).append(entry if kind != "blank" else "not-an-entry")
            n_entries += 1
    rng = random.Random(batch[0][1])
    raw = _dump(evals, rng) if batch[0][0] != "garbage" else _garbage(rng, _dump(evals, rng))
    cfg = rng.choice([{"level": 1, "model_name": "m"}, {}, {"level": "one"}, {"model_name": _hostile_str(rng)}])
    folder = kb.RunFolder("fuzz_run", "fuzz/run", tuple(sorted(files)) + ("eval_results.json",),
                          files.get, cfg, raw)
    return folder, n_entries


def test_fuzz_kernelbench_run_folder() -> None:
    @settings(FUZZ, max_examples=EXAMPLES + 30)  # colliding file names merge a few records
    @given(batches)
    def run(batch: list[tuple[str, int]]) -> None:
        folder, n_entries = _run_folder(batch)
        plan = kb.plan_run(folder)
        results, claims = kb.read_run(plan, {}, {}, set())
        kernel_names = [n for n in folder.names if n.endswith("_kernel.py")]
        from_files = [r for r in results if r.origin.startswith("fuzz/run/") and r.origin[9:] in kernel_names]
        assert sorted(r.origin[9:] for r in from_files) == sorted(kernel_names)  # each file exactly once
        missing = [r for r in results if isinstance(r, Quarantined) and r.reason_code == "missing_source"]
        assert len(results) == len(kernel_names) + len(missing)
        _check(results, len(results))
        evals_rejected = [r for r in plan.rejected if r.reason_code != "bad_json"]
        if any(r.reason_code == "bad_json" for r in plan.rejected):
            assert not claims and len(plan.rejected) == 1
        elif plan.level is not None:
            assert len(claims) + len(evals_rejected) == n_entries  # every eval entry is a claim or refused
        _count("kernelbench", len(kernel_names) + n_entries)

    run()
    _report("kernelbench")


# ---- FlashInfer-Bench definitions, traces, solutions ----------------------------------------

_DEF = {"name": "gemm_n8_k16", "op_type": "gemm", "description": "tiny gemm",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 8}, "K": {"type": "const", "value": 16}},
        "inputs": {"A": {"shape": ["M", "K"], "dtype": "float16"}, "B": {"shape": ["N", "K"], "dtype": "float16"}},
        "outputs": {"C": {"shape": ["M", "N"], "dtype": "float16"}},
        "reference": "import torch\ndef run(A, B):\n    return A @ B.T\n"}
_DEFINITION = flashinfer.parse_definition(json.dumps(_DEF).encode(), "fuzz/def.json")
_CARDS = {"gemm_n8_k16": flashinfer.definition_card(_DEFINITION)}


def _fib_solution(rng: random.Random) -> dict:
    r = rng.randrange(1, 11)
    return {"name": f"m_gemm_n8_k16_cuda_r{r}_c{rng.randrange(3)}", "definition": "gemm_n8_k16", "author": "m",
            "spec": {"language": "cuda", "target_hardware": ["H200"], "entry_point": "main.cpp::run",
                     "binding": "torch", "destination_passing_style": rng.random() < 0.5},
            "sources": [{"path": "main.cpp", "content": "torch::Tensor run(torch::Tensor A, torch::Tensor B);"},
                        {"path": rng.choice(["kernel.cu", "src/kernel.cu"]), "content": "__global__ void k() {}"}]}


def _fib_trace(rng: random.Random) -> dict:
    return {"definition": "gemm_n8_k16", "workload": {"axes": {"M": rng.randrange(1, 100)}, "inputs": {},
                                                       "uuid": "u"},
            "solution": "m_gemm_n8_k16_cuda_r1_c0",
            "evaluation": {"status": "PASSED", "environment": {"hardware": "H200", "libs": {}}, "timestamp": "t",
                           "log": "", "correctness": {"max_relative_error": 0.0},
                           "performance": {"latency_ms": 0.1, "reference_latency_ms": 0.2, "speedup_factor": 2.0}}}


def _hostile_sources(rng: random.Random) -> list:
    return rng.choice([[{"path": p, "content": "x"}] for p in _TRAVERSAL] + [
        [{"path": "main.cpp", "content": "a"}, {"path": "main.cpp", "content": "b"}], "__DEEP__", [],
        [{"path": "main.cpp"}], [{"path": "main.cpp", "content": "x" * (MAX_SOURCE_BYTES + 1)}]])


def test_fuzz_flashinfer_records() -> None:
    @FUZZ
    @given(batches)
    def run(batch: list[tuple[str, int]]) -> None:
        third = len(batch) // 3
        sols = _lines(batch[:third], _fib_solution, ["name", "definition", "author", "spec", "sources"])
        rng = random.Random(batch[0][1])
        sols += [_dump({**_fib_solution(rng), "sources": _hostile_sources(rng)}, rng) for _ in range(4)]
        seen: set[str] = set()
        results = [flashinfer.parse_solution(raw, f"fuzz/s{i}.json", "run", {"gemm_n8_k16": _DEFINITION}, _CARDS,
                                             {}, seen) for i, raw in enumerate(sols)]
        _check(results, len(sols))
        for r in results:
            if isinstance(r, RawAttempt):
                assert all(".." not in p.split("/") and not p.startswith("/") for p in r.extra["sources"])
        traces = _lines(batch[third:2 * third], _fib_trace, ["definition", "workload", "solution", "evaluation"])
        for i, raw in enumerate(traces):
            got = flashinfer.parse_trace(raw, f"fuzz/t:{i}", "run")
            assert isinstance(got, Quarantined) and got.reason_code or isinstance(got, tuple) and got[0]["task_id"]
        defs = _lines(batch[2 * third:], lambda r: dict(_DEF), list(_DEF))
        for i, raw in enumerate(defs):
            d = flashinfer.parse_definition(raw, f"fuzz/d{i}.json")
            if isinstance(d, Quarantined):
                assert d.reason_code and d.reason
            else:
                card = flashinfer.make_card(d)
                assert isinstance(card, flashinfer.TaskCard) or card.code and card.reason
        _count("flashinfer-bench", len(sols) + len(traces) + len(defs))

    run()
    _report("flashinfer-bench")
