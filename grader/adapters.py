"""Adapters that turn foreign task and candidate formats into our `run(*inputs)` interface.

KernelBench modules define `class Model` (reference) or `class ModelNew` (candidate), plus
`get_inputs()` and `get_init_inputs()`. The grader calls `run(*inputs)`, so each adapter returns
the original source unchanged followed by a short epilogue that builds the module once and
forwards calls to it. Standard library and torch only: this runs on bare GPU workers.

How init weights are made identical (seeded construction): both epilogues construct their model
at import time, on the CPU, right after `torch.manual_seed(INIT_SEED)` (the CPU generator then
seeds every device), from the same constructor arguments (the reference's `get_init_inputs()`).
A candidate that creates its parameters in the same order and shapes as the reference (as
KernelBench asks) therefore holds bit-identical weights. The CPU generator's state is restored
after construction (the grader draws inputs from its own generators anyway). The reference is
later cast to float64 when it receives the grader's float64 inputs, which keeps the same values
(tensor attributes that `.to()` skips are cast too, and tensors created inside `forward` follow
float64 through the default dtype). Limits, inherited from KernelBench's protocol: default
initialisers leave norm weights at 1 and biases at 0 (threat 5), and modules are used in training
mode (as KernelBench does), so tasks with active dropout are not deterministic.

FlashInfer-Bench solutions are several C++/CUDA files with a `main.cpp::run` entry point that
may expect its outputs as trailing arguments (destination-passing style); the third adapter
compiles them through torch's extension loader and returns a freshly written output tensor.
"""
from __future__ import annotations

from grader.statics import literal

DEFAULT_INIT_SEED = 0
"""Seed used for construction unless the grader bakes another one in (same for both sides)."""

_EPILOGUE = '''

# ---- kerneltraj adapter: KernelBench `{cls}` -> run(*inputs) (see grader/adapters.py) ----
import torch as _kt_torch

INIT_SEED = {seed}


def _kt_construct():
    init = {init_expr}
    saved = _kt_torch.random.get_rng_state()
    try:
        _kt_torch.manual_seed(INIT_SEED)
        return {cls}(*init)
    finally:
        _kt_torch.random.set_rng_state(saved)


_kt_model = _kt_construct()
_kt_where = None


def run(*inputs):
    global _kt_where
    tensors = [t for t in inputs if isinstance(t, _kt_torch.Tensor)]
    device = tensors[0].device if tensors else _kt_torch.device("cpu")
    # Only the sealed reference sees float64 inputs; the cast keeps the seeded values exactly.
    f64 = {cast64} and any(t.dtype == _kt_torch.float64 for t in tensors)
    if _kt_where != (device, f64):
        if f64:
            _kt_model.to(device=device, dtype=_kt_torch.float64)
            for m in _kt_model.modules():  # plain tensor attributes (an LSTM's h0) are not cast by .to()
                for k, v in list(vars(m).items()):
                    if isinstance(v, _kt_torch.Tensor) and v.is_floating_point():
                        setattr(m, k, v.to(device=device, dtype=_kt_torch.float64))
        else:
            _kt_model.to(device)
        _kt_where = (device, f64)
    default = _kt_torch.get_default_dtype()
    if f64:  # tensors the reference creates inside forward follow its float64 inputs
        _kt_torch.set_default_dtype(_kt_torch.float64)
    try:
        with _kt_torch.no_grad():
            return _kt_model(*inputs)
    finally:
        _kt_torch.set_default_dtype(default)
'''


def _literal(value: object) -> str:
    """Source text of a plain Python literal; anything else is refused (it would be code)."""
    text = repr(value)
    try:
        same = literal(text) == value
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        same = False
    if not same:
        raise ValueError(f"init inputs are not plain literals: {text[:80]}")
    return text


def kernelbench_reference_source(ref_code: str, init_seed: int = DEFAULT_INIT_SEED) -> str:
    """Reference module: the KernelBench source plus `run(*inputs)` over a seeded `Model`."""
    return ref_code.rstrip() + "\n" + _EPILOGUE.format(
        cls="Model", seed=int(init_seed), init_expr="list(get_init_inputs())", cast64=True)


def kernelbench_candidate_source(custom_code: str, init_inputs: list | tuple | None = None,
                                 init_seed: int = DEFAULT_INIT_SEED) -> str:
    """Candidate module: the KernelBench candidate plus `run(*inputs)` over a seeded `ModelNew`.

    `init_inputs` should be the reference's constructor arguments (the importers store them in
    `RawAttempt.extra["init_inputs"]`); when None the candidate's own `get_init_inputs()` is used.
    """
    init_expr = "list(get_init_inputs())" if init_inputs is None else _literal(list(init_inputs))
    return custom_code.rstrip() + "\n" + _EPILOGUE.format(
        cls="ModelNew", seed=int(init_seed), init_expr=init_expr, cast64=False)


_FLASHINFER_EPILOGUE = '''
# ---- kerneltraj adapter: FlashInfer-Bench solution -> run(*inputs) (see grader/adapters.py) ----
import hashlib as _kt_hashlib
import os as _kt_os
import tempfile as _kt_tempfile

import torch as _kt_torch
from torch.utils.cpp_extension import load as _kt_load

_KT_SOURCES = {sources}
_KT_ENTRY = {entry!r}
_KT_DPS = {dps!r}
_KT_INPUT_SHAPES = {input_shapes}
_KT_OUTPUT = {output}


def _kt_build():
    digest = _kt_hashlib.sha256(repr(sorted(_KT_SOURCES.items())).encode()).hexdigest()[:16]
    root = _kt_tempfile.mkdtemp(prefix="fib_")
    paths = []
    for rel, text in _KT_SOURCES.items():
        path = _kt_os.path.join(root, rel)
        _kt_os.makedirs(_kt_os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        if rel.endswith((".cu", ".cpp", ".cc", ".cxx")):
            paths.append(path)
    return _kt_load(name="fib_" + digest, sources=paths, extra_include_paths=[root],
                    build_directory=root, verbose=False)


_kt_fn = getattr(_kt_build(), _KT_ENTRY)


def _kt_axes(inputs):
    axes = {{}}
    for shape, t in zip(_KT_INPUT_SHAPES, inputs):
        for name, n in zip(shape or (), t.shape):
            axes.setdefault(name, int(n))
    return axes


def run(*inputs):
    if not _KT_DPS:
        return _kt_fn(*inputs)
    axes = {{**_KT_OUTPUT["const_axes"], **_kt_axes(inputs)}}
    dtype = getattr(_kt_torch, _KT_OUTPUT["dtype"])
    shape = tuple(axes[a] for a in _KT_OUTPUT["shape"])
    # Poisoned, so elements the kernel never writes cannot pass as correct.
    fill = float("nan") if dtype.is_floating_point else _kt_torch.iinfo(dtype).min
    out = _kt_torch.full(shape, fill, dtype=dtype, device=inputs[0].device)
    _kt_fn(*inputs, out)
    return out
'''


def flashinfer_candidate_source(sources: dict[str, str], entry_symbol: str, destination_passing: bool,
                                input_shapes: list[list[str] | None], output_shape: list[str],
                                output_dtype: str, const_axes: dict[str, int]) -> str:
    """A Python module that compiles a FlashInfer-Bench CUDA solution and exposes `run(*inputs)`.

    Sources are embedded as Python string literals and written to a private temporary folder at
    import time; the paths were validated by the importer (relative, no `..`).
    """
    output = {"shape": list(output_shape), "dtype": output_dtype, "const_axes": dict(const_axes)}
    return _FLASHINFER_EPILOGUE.format(
        sources=repr(dict(sources)), entry=entry_symbol, dps=bool(destination_passing),
        input_shapes=repr([list(s) if s is not None else None for s in input_shapes]), output=repr(output))
