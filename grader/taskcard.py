"""Task cards: what a task is, which sizes it is graded on, and how its inputs are drawn.

A card is plain data plus two pieces of Python source (the reference and the expert), so its
revision is a content hash of everything that can change a grade. Cards live in
`grader/catalogue/*.py`, each module exposing `CARDS: list[TaskCard]`. The sealed parent loads
them; the candidate's worker never does.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}
"""Bytes per element of every dtype a card's output may have."""
DTYPES = tuple(DTYPE_BYTES)

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    # (atol, rtol) against a float64 reference; fp32 is strict so precision downgrades fail.
    "float32": (1e-5, 1e-4),
    "float16": (1e-3, 1e-2),
    "bfloat16": (1e-2, 2e-2),
}


@dataclass(frozen=True)
class InputSpec:
    """One positional input of the task's entry point."""

    name: str
    shape: tuple[str | int, ...]
    """Axis names (looked up in the size dict) or fixed integers."""
    dtype: str = "float32"
    """One of DTYPES, or `bool` (a mask: drawn as 0/1 integers)."""
    dist: str = "normal"
    """`normal` (mean + std * randn), `uniform` (low..high), `randint` (low..high-1, ints), or `scalar`: not a
    tensor but the Python number `low` (an int for integer dtypes), the same in every call; `task`: made by the
    task's own `get_inputs()` (a card with `inputs_from="task"`), never drawn."""
    mean: tuple[float, float] = (-1.0, 1.0)
    """Range from which each call's mean is drawn (normal): never centred-only."""
    std: tuple[float, float] = (0.5, 2.0)
    """Range from which each call's standard deviation is drawn (normal)."""
    low: float | str = 0.0
    """Lower bound (uniform/randint); a string names a size axis."""
    high: float | str = 1.0
    """Upper bound, exclusive for randint; a string names a size axis."""
    post: tuple[str, ...] = ()
    """Steps applied to the draw in order, from a fixed vocabulary (`grader.inputs.POST_STEPS`): how a task
    file shapes its random tensors (`sym`, `triu`, `tril`, `softmax:DIM`, `scale:LO:HI`, `affine:A:B`)."""


@dataclass(frozen=True)
class TaskCard:
    """Everything the sealed grader knows about one task."""

    task_id: str
    family: str
    """Workload family: the unit of held-out splits (softmax, gemm, attention, ...)."""
    lineage: str
    """Source lineage (who wrote the task and from what), e.g. `kerneltraj/softmax`."""
    description: str
    inputs: tuple[InputSpec, ...]
    output_shape: tuple[str | int, ...]
    output_dtype: str
    reference: str
    """Python source defining `run(*inputs)`; called on float64-upcast inputs on the grader side."""
    expert: str
    """Python source defining `run(*inputs)`: a production library op or a tuned Triton kernel."""
    expert_kind: str
    """`library` or `triton`."""
    public_sizes: dict[str, tuple[dict[str, int], ...]]
    """Per profile (`cpu`, `gpu`): sizes the agent saw."""
    hidden_sizes: dict[str, tuple[dict[str, int], ...]]
    """Per profile: sealed sizes the agent never saw."""
    bytes_moved: str
    """Python expression over the size axes and `E` (element size of the output dtype): the least
    bytes one call must move through memory; with the device's bandwidth it sets the time floor."""
    forbidden_ops: tuple[str, ...] = ()
    """Profiler op names (`aten::_softmax`) a candidate may not call: the reference's own op."""
    own_kernel_ops: tuple[str, ...] = ()
    """Library ops an own-kernel (Triton or CUDA) candidate of this task may call besides STRUCTURAL_OPS."""
    pytorch_ops: tuple[str, ...] = ()
    """What a PyTorch candidate of this task may compute with: names of `OP_GROUPS` (and aten op names), on top
    of STRUCTURAL_OPS and less `forbidden_ops`. An allow-list: an alias, an in-place, private or more general
    variant of the task's own op is refused like the op itself. Empty: only `forbidden_ops` are refused."""
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per-dtype (atol, rtol) overrides of DEFAULT_TOLERANCES."""
    hidden_sizes_note: str = ""
    """Why a task has no hidden sizes, when it has none (imported single-size tasks)."""
    error_scale: str = ""
    """Python source defining `run(*inputs)` on the float64 inputs: each output element's magnitude
    for rtol where |reference| understates the rounding an honest kernel accrues (a prefix sum that
    crosses zero carries the error of everything summed before it). Empty: |reference|."""
    init_inputs: str = ""
    """Python literal text of the constructor arguments of a module-style task (KernelBench's
    `get_init_inputs()`): a `ModelNew` candidate is built with these, never with its own. Empty for tasks
    whose candidates define `run(*inputs)`."""
    inputs_from: str = ""
    """How each call's inputs are made. Empty: drawn from `inputs` (seeded draws plus steps, `grader.inputs`),
    by the parent and every worker alike, at any size. `task`: the task file's own `get_inputs()`, where its
    inputs cannot be re-expressed as draws: it runs only in the task's sandboxed reference worker, under a
    generator seeded per call, at the task's own sizes; the parent hands the tensors to the candidate and the
    expert (`inputs` then only documents their shapes and dtypes, `dist="task"`)."""

    @property
    def revision(self) -> str:
        """Content hash of everything that can change a grade."""
        d = dataclasses.asdict(self)
        for late in ("error_scale", "own_kernel_ops", "init_inputs", "inputs_from", "pytorch_ops"):  # added later:
            if not d[late]:                                                              # cards without one
                del d[late]                                                              # keep their revisions
        for spec in d["inputs"]:
            if not spec["post"]:
                del spec["post"]
        blob = json.dumps(d, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def tolerance(self, dtype: str | None = None) -> tuple[float, float]:
        dt = dtype or self.output_dtype
        return self.tolerances.get(dt, DEFAULT_TOLERANCES.get(dt, (0.0, 0.0)))

    def sizes(self, profile: str) -> list[tuple[dict[str, int], bool]]:
        """(size, hidden) pairs for a profile: public first, then hidden."""
        return ([(s, False) for s in self.public_sizes.get(profile, ())]
                + [(s, True) for s in self.hidden_sizes.get(profile, ())])

    def public_card(self) -> dict[str, Any]:
        """What may leave the sealed side: no hidden sizes, no expert source."""
        d = dataclasses.asdict(self)
        for sealed in ("hidden_sizes", "expert"):
            d.pop(sealed)
        d["revision"] = self.revision
        return d


STRUCTURAL_OPS = frozenset(f"aten::{op}" for op in (
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "set_",
    "resize_", "copy_", "clone", "contiguous", "to", "_to_copy", "lift_fresh", "detach", "alias", "view", "view_as",
    "reshape", "_reshape_alias", "_unsafe_view", "as_strided", "expand", "expand_as", "t", "transpose", "permute",
    "numpy_T", "mT", "mH", "adjoint", "matrix_H", "movedim", "moveaxis", "swapaxes", "swapdims", "ravel", "reshape_as",
    "broadcast_to", "diagonal", "unfold", "tensor_split", "hsplit", "vsplit", "dsplit", "squeeze", "unsqueeze",
    "flatten", "unflatten", "select", "slice", "narrow", "unbind", "split",
    "split_with_sizes", "chunk", "resolve_conj", "resolve_neg", "_local_scalar_dense", "item", "arange",
    "result_type", "scalar_tensor", "lift", "lift_fresh_copy", "_has_compatible_shallow_copy_type"))
"""What an own-kernel candidate may ask the library for: memory, layout and dtype, never arithmetic. Any
other aten op in its call computed part of the answer with the library (threat 17): an allow-list,
so an alias, an in-place or private variant or a more general op is refused like the op itself. The views that
reorder dimensions under other names (`x.T` records `aten::numpy_T`, `x.mT`, `x.movedim`...) are layout, as
`transpose` and `permute` are, and so are the other views of real tensors (`ravel`, `broadcast_to`, `diagonal`,
`unfold`, the splits): until grader 0.20.5 they were missing, and the demo's honest
`attention_fp16/per_head_loop.py` (`k.float().T`) was floored as a library op on every device (H100 run 115). Views
that carry a lazy operation of their own (`conj`, `_neg_view`) or move data to another device (`cpu`) stay out; the
conjugate transposes (`mH`, `adjoint`, `matrix_H`) are transposes of the real tensors tasks have, and a complex one's
lazy conjugation is done by `resolve_conj`, allowed already."""


def _aten(*names: str) -> frozenset[str]:
    return frozenset(f"aten::{n}" for n in names)


OP_GROUPS: dict[str, frozenset[str]] = {
    "pointwise": _aten(
        "abs", "add", "add_", "sub", "sub_", "rsub", "mul", "mul_", "div", "div_", "neg", "reciprocal", "square",
        "exp", "exp_", "exp2", "expm1", "log", "log_", "log2", "log1p", "sqrt", "rsqrt", "pow", "pow_", "tanh", "erf",
        "erfc", "sigmoid", "relu", "relu_", "sign", "sin", "cos", "floor", "ceil", "round", "trunc", "fmod",
        "remainder", "maximum", "minimum", "fmax", "fmin", "clamp", "clamp_", "clamp_min", "clamp_max", "where",
        "masked_fill", "masked_fill_", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
        "logical_not", "bitwise_and", "bitwise_or", "bitwise_not", "isnan", "isinf", "nan_to_num", "lerp", "addcmul",
        "addcdiv", "logaddexp", "fill", "any", "all"),
    "reduction": _aten("sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "std_mean",
                       "argmax", "argmin", "norm", "linalg_vector_norm"),
    "indexing": _aten("cat", "stack", "hstack", "vstack", "gather", "index", "index_select", "take_along_dim",
                      "repeat", "repeat_interleave", "roll", "flip", "tril", "triu", "one_hot", "pad",
                      "constant_pad_nd", "masked_select", "nonzero", "index_put", "index_put_", "_index_put_impl_"),
    "matmul": _aten("mm", "bmm", "matmul", "addmm", "baddbmm", "einsum", "dot", "mv", "bmm_"),
}
"""Op groups a card's `pytorch_ops` names: elementwise arithmetic, plain reductions, indexing and data
movement, and matrix products. None of them holds a fused library op (softmax, a norm layer, an activation
beyond relu and sigmoid, a scan, a sort, attention, a loss): those stay outside every group."""


def pytorch_allowed(card: TaskCard) -> frozenset[str] | None:
    """The aten ops a PyTorch candidate of `card` may run, or None where the card names no allow-list."""
    if not card.pytorch_ops:
        return None
    allowed = set(STRUCTURAL_OPS)
    for name in card.pytorch_ops:
        allowed |= OP_GROUPS.get(name, {name})
    return frozenset(allowed - set(card.forbidden_ops))


def size_key(size: dict[str, int]) -> str:
    return ",".join(f"{k}={size[k]}" for k in sorted(size))


def resolve_shape(shape: tuple[str | int, ...], size: dict[str, int]) -> tuple[int, ...]:
    return tuple(size[a] if isinstance(a, str) else int(a) for a in shape)


def bytes_floor(card: TaskCard, size: dict[str, int]) -> float:
    """Least bytes one call must move (evaluated from the card's declared expression)."""
    elem = DTYPE_BYTES[card.output_dtype]
    return float(eval(card.bytes_moved, {"__builtins__": {}}, {**size, "E": elem}))  # trusted card text
