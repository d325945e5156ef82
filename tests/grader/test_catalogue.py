"""The demo task catalogue: every card's expert matches its float64 reference, every input matters,
trivial outputs fail, and every forbidden op name is one the profiler really emits.

On CPU the Triton experts run under the Triton interpreter, so TRITON_INTERPRET is set before
anything can import triton (a `triton.jit` function reads it when it is decorated).
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import dataclasses  # noqa: E402
import importlib.util  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from grader.catalogue import load_catalogue  # noqa: E402
from grader.taskcard import TaskCard, bytes_floor, resolve_shape, size_key  # noqa: E402

CATALOGUE = load_catalogue()
CARDS = sorted(CATALOGUE.values(), key=lambda c: c.task_id)

# The fixed task list (/work/notes/tasks.md): other parts of kerneltraj rely on these ids and families.
EXPECTED_FAMILIES = {
    "gelu_fp32": "activation", "silu_mul_fp16": "activation", "bias_leaky_relu_fp32": "activation",
    "row_sum_fp32": "reduction", "row_max_fp32": "reduction", "col_mean_fp32": "reduction",
    "softmax_rows_fp32": "softmax", "softmax_rows_fp16": "softmax", "log_softmax_rows_fp32": "softmax",
    "layernorm_fp32": "norm", "rmsnorm_fp32": "norm", "rmsnorm_fp16": "norm",
    "matmul_fp32": "gemm", "matmul_fp16": "gemm", "linear_bias_relu_fp16": "gemm",
    "attention_fp16": "attention", "causal_attention_fp16": "attention",
    "cross_entropy_fp32": "cross_entropy", "cross_entropy_smooth_fp32": "cross_entropy",
    "rotary_fp32": "rotary", "rotary_fp16": "rotary",
    "cumsum_fp32": "scan", "logcumsumexp_fp32": "scan",
    "topk_values_fp32": "topk", "row_argmax_int64": "topk",
}
DERIVED_LINEAGE = {"cross_entropy": "kerneltraj/softmax"}

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "int64": torch.int64, "int32": torch.int32}

# Names that do the whole job through a path none of the catalogue's references or library experts
# takes on CPU; each probe shows the profiler really emits the name.
_PROBE_X = torch.randn(4, 16, dtype=torch.float64)
PROBES = {
    "aten::max": lambda: _PROBE_X.max(dim=-1),
    "aten::min": lambda: _PROBE_X.min(dim=-1),
    "aten::argmin": lambda: _PROBE_X.argmin(dim=-1),
    "aten::bmm": lambda: torch.bmm(_PROBE_X[None], _PROBE_X.T[None]),
    "aten::sort": lambda: torch.sort(_PROBE_X, dim=-1, descending=True),
    "aten::logsumexp": lambda: torch.logsumexp(_PROBE_X, dim=-1),
    "aten::addmm": lambda: torch.addmm(_PROBE_X[:, 0], _PROBE_X, _PROBE_X.T),
    "aten::linear": lambda: torch.nn.functional.linear(_PROBE_X, _PROBE_X),
}
# Backend ops that scaled_dot_product_attention dispatches to on CUDA (or on other dtypes): not
# reachable on a CPU profile, so here they must at least be registered ATen operators; the gpu test
# checks that the CUDA expert emits one of them.
SDPA_BACKENDS = {
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward", "aten::_scaled_dot_product_attention_math",
    "aten::_cudnn_attention_forward",
}
# No production library op computes the whole task (rotary embedding has no ATen op).
NO_LIBRARY_OP = {"rotary_fp32", "rotary_fp16"}

_SOURCE_DIR = Path(tempfile.mkdtemp(prefix="kerneltraj-catalogue-"))
_MODULES: dict[tuple[str, str, bool], ModuleType] = {}


def load_source(source: str, name: str, interpret: bool = True) -> ModuleType:
    """Import card source from a real file (triton.jit reads the kernel's source through inspect)."""
    key = (name, source, interpret)
    if key not in _MODULES:
        path = _SOURCE_DIR / f"{name}_{'interp' if interpret else 'dev'}_{zlib.crc32(source.encode()):08x}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        previous = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
        try:
            sys.modules[path.stem] = mod
            spec.loader.exec_module(mod)
        finally:
            if previous is None:
                os.environ.pop("TRITON_INTERPRET")
            else:
                os.environ["TRITON_INTERPRET"] = previous
        _MODULES[key] = mod
    return _MODULES[key]


def _bound(value: float | str, size: dict[str, int]) -> float:
    return float(size[value]) if isinstance(value, str) else float(value)


def make_inputs(card: TaskCard, size: dict[str, int], seed: int, device: str = "cpu") -> list[torch.Tensor]:
    """Fresh inputs drawn as each InputSpec declares: a mean and std drawn per call, then values."""
    gen = torch.Generator().manual_seed(seed)

    def draw(lo_hi: tuple[float, float]) -> float:
        lo, hi = lo_hi
        return lo + (hi - lo) * torch.rand((), generator=gen, dtype=torch.float64).item()

    tensors = []
    for spec in card.inputs:
        shape = resolve_shape(spec.shape, size)
        dtype = TORCH_DTYPES[spec.dtype]
        if spec.dist == "normal":
            mean, std = draw(spec.mean), draw(spec.std)
            t = mean + std * torch.randn(shape, generator=gen, dtype=torch.float32)
        elif spec.dist == "uniform":
            lo, hi = _bound(spec.low, size), _bound(spec.high, size)
            t = lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=torch.float32)
        elif spec.dist == "randint":
            t = torch.randint(int(_bound(spec.low, size)), int(_bound(spec.high, size)), shape, generator=gen)
        else:
            raise AssertionError(f"{card.task_id}: unknown dist {spec.dist!r}")
        tensors.append(t.to(dtype).to(device))
    return tensors


def upcast(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.double() if t.is_floating_point() else t for t in inputs]


def reference_output(card: TaskCard, inputs: list[torch.Tensor]) -> torch.Tensor:
    return load_source(card.reference, f"ref_{card.task_id}").run(*upcast(inputs))


def magnitude(card: TaskCard, ref: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
    """What rtol multiplies, as the grader takes it: max(|ref|, the card's error scale on the inputs)."""
    if not card.error_scale:
        return ref.double().abs()
    scale = load_source(card.error_scale, f"scale_{card.task_id}", interpret=False).run(*upcast(inputs))
    return torch.maximum(ref.double().abs(), scale.to(ref.device).double().abs())


def mismatches(card: TaskCard, out: torch.Tensor, ref: torch.Tensor, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Boolean mask of elements outside |out - ref| <= atol + rtol * max(|ref|, scale) (NaN and Inf fail)."""
    atol, rtol = card.tolerance()
    err = (out.double() - ref.double()).abs()
    ok = err <= atol + rtol * magnitude(card, ref, inputs)
    return ~ok


def seed_for(*parts: object) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode())


def cpu_cases() -> list:
    return [pytest.param(card, size, id=f"{card.task_id}[{size_key(size)}{'/hidden' if hidden else ''}]")
            for card in CARDS for size, hidden in card.sizes("cpu")]


def profiled_ops(fn, *args) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn(*args)
    return {event.key for event in prof.key_averages()}


# ---------------------------------------------------------------- the catalogue as a whole


def test_catalogue_holds_the_fixed_task_list():
    assert len(CARDS) >= 24
    assert len({c.family for c in CARDS}) >= 8
    assert len({c.task_id for c in CARDS}) == len(CARDS)
    assert {c.task_id: c.family for c in CARDS if c.task_id in EXPECTED_FAMILIES} == EXPECTED_FAMILIES
    for card in CARDS:
        assert card.lineage == DERIVED_LINEAGE.get(card.family, f"kerneltraj/{card.family}"), card.task_id
        assert card.expert_kind in ("triton", "library"), card.task_id
        assert card.output_dtype in TORCH_DTYPES, card.task_id


def test_revision_is_stable_and_follows_every_field():
    card = CATALOGUE["layernorm_fp32"]
    assert card.revision == load_catalogue()["layernorm_fp32"].revision
    assert card.revision == dataclasses.replace(card).revision
    changed = [
        dataclasses.replace(card, description=card.description + " "),
        dataclasses.replace(card, expert=card.expert + "\n"),
        dataclasses.replace(card, reference=card.reference.replace("1e-5", "1e-6")),
        dataclasses.replace(card, tolerances={"float32": (1e-4, 1e-3)}),
        dataclasses.replace(card, hidden_sizes={**card.hidden_sizes, "cpu": ({"M": 8, "N": 8},)}),
        dataclasses.replace(card, inputs=(dataclasses.replace(card.inputs[0], std=(0.5, 3.0)),) + card.inputs[1:]),
        dataclasses.replace(card, forbidden_ops=card.forbidden_ops[:1]),
    ]
    revisions = {c.revision for c in changed}
    assert card.revision not in revisions and len(revisions) == len(changed)


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.task_id)
def test_card_declares_sound_sizes_and_inputs(card: TaskCard):
    for profile_name in ("cpu", "gpu"):
        assert card.public_sizes.get(profile_name), (card.task_id, profile_name)
        hidden = card.hidden_sizes.get(profile_name)
        assert hidden, (card.task_id, profile_name)
        # A hidden size must break power-of-two assumptions somewhere.
        assert any(v & (v - 1) for size in hidden for v in size.values()), (card.task_id, profile_name)
        for size, _ in card.sizes(profile_name):
            assert bytes_floor(card, size) > 0
            for axis, value in size.items():
                # A derived axis (rotary's "D/2") is spelled as its formula and must agree with it.
                if not axis.isidentifier():
                    assert value == eval(axis, {"__builtins__": {}}, dict(size)), (card.task_id, axis)
            for spec in card.inputs:
                resolve_shape(spec.shape, size)
    for size, _ in card.sizes("cpu"):
        # The Triton interpreter costs about a millisecond per program: CPU sizes stay tiny.
        biggest = max(math.prod(resolve_shape(s.shape, size)) for s in card.inputs)
        assert biggest <= 33_000, (card.task_id, size)
    for spec in card.inputs:
        assert spec.dtype in TORCH_DTYPES
        if spec.dist == "normal":
            assert spec.mean != (0.0, 0.0) and spec.mean[0] <= spec.mean[1], (card.task_id, spec.name)
            assert 0 < spec.std[0] <= spec.std[1], (card.task_id, spec.name)
        elif spec.dist == "randint":
            assert not TORCH_DTYPES[spec.dtype].is_floating_point, (card.task_id, spec.name)


# ---------------------------------------------------------------- expert against reference


@pytest.mark.parametrize(("card", "size"), cpu_cases())
def test_expert_matches_reference_on_cpu_sizes(card: TaskCard, size: dict[str, int]):
    inputs = make_inputs(card, size, seed_for(card.task_id, size_key(size)))
    kept = [t.clone() for t in inputs]
    out = load_source(card.expert, f"expert_{card.task_id}").run(*inputs)
    ref = reference_output(card, kept)
    assert type(out) is torch.Tensor
    assert tuple(out.shape) == resolve_shape(card.output_shape, size)
    assert out.dtype == TORCH_DTYPES[card.output_dtype] and out.device.type == "cpu"
    assert ref.dtype == (torch.float64 if out.dtype.is_floating_point else out.dtype)
    assert all(torch.equal(a, b) for a, b in zip(inputs, kept)), "expert modified its inputs"
    bad = mismatches(card, out, ref, kept)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements outside {card.tolerance()}"


def test_topk_family_experts_keep_ties_as_torch_does():
    # Random inputs almost never tie at the top: plant ties (within a chunk and across chunks).
    x = torch.randn(6, 300, generator=torch.Generator().manual_seed(7))
    x[0, [3, 17, 290]] = 9.0
    x[1, :] = 1.0
    x[2, [260, 5]] = 7.0
    topk = load_source(CATALOGUE["topk_values_fp32"].expert, "expert_topk_values_fp32").run(x)
    argmax = load_source(CATALOGUE["row_argmax_int64"].expert, "expert_row_argmax_int64").run(x)
    assert torch.equal(topk, torch.topk(x, 8, dim=-1).values)
    assert torch.equal(argmax, torch.argmax(x, dim=-1))


# ---------------------------------------------------------------- the checks have teeth


@pytest.mark.parametrize(("card", "index"), [
    pytest.param(card, i, id=f"{card.task_id}:{spec.name}")
    for card in CARDS for i, spec in enumerate(card.inputs) if TORCH_DTYPES[spec.dtype].is_floating_point])
def test_every_float_input_changes_the_reference(card: TaskCard, index: int):
    # Threat 5: an input the output ignores (or that enters only as an identity) hides a wrong formula.
    # Elementwise noise must move the reference beyond the tolerance; so must scaling any input after
    # the first (weights, biases, gates, cos/sin, keys, values), which a formula that drops it ignores.
    # (Scaling the first input can be a true invariance: layernorm, softmax of a shift, argmax.)
    size = card.public_sizes["cpu"][0]
    inputs = make_inputs(card, size, seed_for("perturb", card.task_id))
    ref = reference_output(card, inputs)
    original = inputs[index]
    noise = torch.randn(original.shape, generator=torch.Generator().manual_seed(seed_for("noise", card.task_id)))
    perturbations = {"noise": original.float() + 0.5 * noise}
    if index > 0:
        perturbations["scale"] = original.float() * 1.3
    for how, perturbed in perturbations.items():
        changed = mismatches(card, reference_output(card, inputs[:index] + [perturbed.to(original.dtype)]
                                                    + inputs[index + 1:]), ref, inputs)
        assert changed.any(), f"{how} on {card.inputs[index].name} left the reference within tolerance"


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.task_id)
def test_constant_outputs_fail(card: TaskCard):
    # Threat 2: zeros (or the output's mean everywhere) must not sit inside the tolerance.
    for size, _ in card.sizes("cpu"):
        inputs = make_inputs(card, size, seed_for("const", card.task_id, size_key(size)))
        ref = reference_output(card, inputs)
        out_dtype = TORCH_DTYPES[card.output_dtype]
        zeros = torch.zeros(ref.shape, dtype=out_dtype)
        mean = torch.full(ref.shape, ref.double().mean().item()).to(out_dtype)
        assert mismatches(card, zeros, ref, inputs).any()
        assert mismatches(card, mean, ref, inputs).any()


def _emitted_by_family(card: TaskCard) -> set[str]:
    ops: set[str] = set()
    for other in CARDS:
        if other.family != card.family:
            continue
        size = other.public_sizes["cpu"][0]
        inputs = make_inputs(other, size, seed_for("profile", other.task_id))
        ops |= profiled_ops(load_source(other.reference, f"ref_{other.task_id}").run, *upcast(inputs))
        if other.expert_kind == "library":
            ops |= profiled_ops(load_source(other.expert, f"expert_{other.task_id}").run, *inputs)
    return ops


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.task_id)
def test_forbidden_ops_are_real_profiler_names(card: TaskCard):
    if card.task_id in NO_LIBRARY_OP:
        assert card.forbidden_ops == ()
        return
    size = card.public_sizes["cpu"][0]
    inputs = make_inputs(card, size, seed_for("profile", card.task_id))
    own = profiled_ops(load_source(card.reference, f"ref_{card.task_id}").run, *upcast(inputs))
    if card.expert_kind == "library":
        own |= profiled_ops(load_source(card.expert, f"expert_{card.task_id}").run, *inputs)
    # The library op that does this task's whole job (what its reference or library expert calls) is forbidden.
    assert own & set(card.forbidden_ops), (card.task_id, sorted(own))
    family_ops = _emitted_by_family(card)
    for name in card.forbidden_ops:
        assert name.startswith("aten::") and hasattr(torch.ops.aten, name.removeprefix("aten::")), name
        if name in SDPA_BACKENDS or name in family_ops:
            continue
        assert name in PROBES, f"{card.task_id}: {name} is emitted by nothing the test ran"
        assert name in profiled_ops(PROBES[name]), name


# ---------------------------------------------------------------- on a CUDA device

GPU_CASES = [pytest.param(card, size, id=f"{card.task_id}[{size_key(size)}{'/hidden' if hidden else ''}]")
             for card in CARDS for size, hidden in card.sizes("gpu")]


def _need_cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


@pytest.mark.gpu
@pytest.mark.parametrize(("card", "size"), GPU_CASES)
def test_expert_matches_reference_on_gpu_sizes(card: TaskCard, size: dict[str, int]):
    _need_cuda()
    inputs = make_inputs(card, size, seed_for("gpu", card.task_id, size_key(size)), device="cuda")
    out = load_source(card.expert, f"expert_{card.task_id}", interpret=False).run(*inputs)
    ref = load_source(card.reference, f"ref_{card.task_id}", interpret=False).run(*upcast(inputs))
    assert type(out) is torch.Tensor and out.is_cuda
    assert tuple(out.shape) == resolve_shape(card.output_shape, size) and out.dtype == TORCH_DTYPES[card.output_dtype]
    atol, rtol = card.tolerance()
    err = (out.double() - ref.double()).abs()
    worst = (err / (atol + rtol * magnitude(card, ref, inputs))).max().item() if atol or rtol else err.max().item()
    print(f"\n[tolerance] {card.task_id} {size_key(size)}: worst error / allowed = {worst:.3g}")
    bad = mismatches(card, out, ref, inputs)
    assert not bad.any(), f"{int(bad.sum())} of {bad.numel()} elements outside {card.tolerance()}"


@pytest.mark.gpu
@pytest.mark.parametrize(("card", "size"), GPU_CASES)
def test_gpu_sizes_keep_the_expert_busy(card: TaskCard, size: dict[str, int]):
    # A GPU size must keep the expert running for about 20 us or more, or launch overhead and timer
    # resolution decide the reward. The reference run in the native dtypes (PyTorch's own ops) is
    # timed beside it for the record.
    _need_cuda()
    from triton.testing import do_bench

    inputs = make_inputs(card, size, seed_for("gpu-time", card.task_id, size_key(size)), device="cuda")
    expert = load_source(card.expert, f"expert_{card.task_id}", interpret=False).run
    native = load_source(card.reference, f"ref_{card.task_id}", interpret=False).run
    expert_ms = do_bench(lambda: expert(*inputs), warmup=10, rep=50)
    native_ms = do_bench(lambda: native(*inputs), warmup=10, rep=50)
    gbps = bytes_floor(card, size) / (expert_ms * 1e-3) / 1e9
    print(f"\n[timing] {card.task_id} {size_key(size)}: expert {expert_ms * 1e3:.1f} us ({gbps:.0f} GB/s floor),"
          f" torch reference {native_ms * 1e3:.1f} us")
    assert expert_ms * 1e3 >= 15.0


@pytest.mark.gpu
@pytest.mark.parametrize("card", [c for c in CARDS if c.family == "attention"], ids=lambda c: c.task_id)
def test_cuda_attention_expert_emits_a_forbidden_backend(card: TaskCard):
    _need_cuda()
    size = card.public_sizes["gpu"][0]
    inputs = make_inputs(card, size, seed_for("gpu-profile", card.task_id), device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        load_source(card.expert, f"expert_{card.task_id}", interpret=False).run(*inputs)
        torch.cuda.synchronize()
    emitted = {event.key for event in prof.key_averages()}
    print(f"\n[profile] {card.task_id}: {sorted(e for e in emitted if e.startswith('aten::'))}")
    assert emitted & SDPA_BACKENDS & set(card.forbidden_ops), sorted(emitted)
