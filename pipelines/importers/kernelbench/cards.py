"""KernelBench tasks as task cards: the module's shape (`shapes`), its reference probed in the sandbox (`probe`)
at its own size and at the sealed values of its batch axis, PyTorch eager as the expert."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Iterable

from grader.adapters import kernelbench_reference_source
from grader.taskcard import InputSpec, TaskCard
from pipelines.curation.families import classify_kernelbench, kernelbench_task_id
from pipelines.importers.base import TaskReject
from pipelines.importers.kernelbench.probe import ProbeResult, probe_outputs
from pipelines.importers.kernelbench.shapes import ELEM, IN_ELEM, ModuleShape, analyse_module, scalar_spec

HIDDEN_SIZES_NOTE = ("KernelBench tasks declare one size through get_inputs(); hidden sizes rebind the "
                     "batch axis where only get_inputs uses it: ")
CPU_FLOP_BUDGET = 2e9
"""A task gets a `cpu` profile only when one reference call needs at most this many FLOPs ..."""
CPU_BYTE_BUDGET = 64 << 20
"""... and its inputs plus output fit in this many bytes."""


def _own_input_specs(probe: ProbeResult) -> tuple[InputSpec, ...]:
    """Documentary specs of a task's own inputs (shapes and dtypes as the probe saw them; `dist="task"`);
    TaskReject where one is neither a tensor of a dtype we carry nor a plain number."""
    specs = []
    for i, v in enumerate(probe.own_inputs or ()):
        if "scalar" in v and isinstance(v["scalar"], (int, float)):
            specs.append(scalar_spec(f"in{i}", v["scalar"], i))
        elif v.get("dtype") in IN_ELEM and isinstance(v.get("shape"), list):
            specs.append(InputSpec(f"in{i}", tuple(int(d) for d in v["shape"]), v["dtype"], dist="task"))
        else:
            raise TaskReject("non_tensor_input", f"get_inputs returns {v.get('other') or v.get('dtype')!s} at "
                                                 f"position {i}: tensors of {sorted(IN_ELEM)} and numbers only")
    if not specs:
        raise TaskReject("probe_failed", "the probe did not see what get_inputs returns")
    return tuple(specs)


def hidden_batches(b: int) -> list[int]:
    """Sealed values of a batch axis the agent saw at `b`: half of it, and one less (an odd or unaligned
    count), never more (the float64 reference pays for every element)."""
    return sorted({max(1, b // 2), b - 1} - {b, 0})


def _numel(spec_shape: Iterable[str | int], size: dict[str, int]) -> int:
    return math.prod(size[d] if isinstance(d, str) else d for d in spec_shape)


def task_card(level: int, problem: int, ref_code: str, shape: ModuleShape, probe: ProbeResult,
              hidden: dict[int, Any] | None = None) -> TaskCard:
    """The card of one KernelBench task: its own size public, hidden sizes where its batch axis may be rebound
    (`hidden`: hidden batch -> probe result there), PyTorch eager as its expert."""
    if shape.own_inputs:
        shape = dataclasses.replace(shape, inputs=_own_input_specs(probe))
    in_bytes = sum(_numel(s.shape, shape.size) * IN_ELEM[s.dtype] for s in shape.inputs if s.dist != "scalar")
    out_numel = math.prod(probe.shape)
    axis = shape.batch_axis
    out_axes = _output_axes(probe, axis, shape.size[axis], hidden or {}) if axis and hidden else (
        shape.batch_note or "no hidden batch")
    hidden_sizes = ([dict(shape.size, **{axis: h}) for h in sorted(hidden or {})]
                    if not isinstance(out_axes, str) else [])
    family = classify_kernelbench(ref_code, level).value
    reference = kernelbench_reference_source(ref_code)
    cpu_ok = (probe.flops is not None and probe.flops <= CPU_FLOP_BUDGET
              and in_bytes + out_numel * ELEM[probe.dtype] <= CPU_BYTE_BUDGET)
    in_expr = " + ".join(f"{'*'.join(map(str, s.shape)) or 1} * {IN_ELEM[s.dtype]}"
                         for s in shape.inputs if s.dist != "scalar") or "0"
    out_dims = out_axes if not isinstance(out_axes, str) else tuple(probe.shape)
    return TaskCard(
        task_id=kernelbench_task_id(level, problem),
        family=family,
        lineage=f"kernelbench/L{level}",
        description=shape.description or f"KernelBench level {level} problem {problem}",
        inputs=shape.inputs,
        output_shape=tuple(out_dims),
        output_dtype=probe.dtype,
        reference=reference,
        expert=reference,  # KernelBench's baseline is PyTorch eager: the reference module itself
        expert_kind="library",
        public_sizes={"gpu": (dict(shape.size),), **({"cpu": (dict(shape.size),)} if cpu_ok else {})},
        hidden_sizes=({"gpu": tuple(hidden_sizes), **({"cpu": tuple(hidden_sizes)} if cpu_ok else {})}
                      if hidden_sizes else {}),
        bytes_moved=f"{in_expr} + {'*'.join(map(str, out_dims)) or 1} * E",
        hidden_sizes_note="" if hidden_sizes else HIDDEN_SIZES_NOTE + f"none here, {out_axes}" + (
            f" ({shape.own_inputs})" if shape.own_inputs else ""),
        init_inputs=repr(shape.init_inputs) if shape.init_inputs is not None else (probe.init_inputs or ""),
        inputs_from="task" if shape.own_inputs else "",
    )


def build_cards(tasks: dict[tuple[int, int], str], probe: Callable = probe_outputs,
                ) -> dict[tuple[int, int], TaskCard | TaskReject]:
    """Cards for (level, problem) -> reference code; a TaskReject says why a task has none."""
    out: dict[tuple[int, int], TaskCard | TaskReject] = {}
    shapes: dict[tuple[int, int], ModuleShape] = {}
    for key, code in tasks.items():
        try:
            shapes[key] = analyse_module(code)
        except TaskReject as r:
            out[key] = r
    jobs = {f"{lv}:{p}": (tasks[(lv, p)], "task" if sh.own_inputs else _probe_inputs(sh))
            for (lv, p), sh in shapes.items()}
    for (lv, p), sh in shapes.items():  # the same reference at each hidden batch: how its output follows
        if sh.batch_axis:
            for h in hidden_batches(sh.size[sh.batch_axis]):
                jobs[f"{lv}:{p}:h{h}"] = (tasks[(lv, p)], _probe_inputs(sh, {sh.batch_axis: h}))
    results = probe(jobs) if jobs else {}
    for (lv, p), sh in shapes.items():
        res = results.get(f"{lv}:{p}") or TaskReject("probe_failed", "no probe result")
        if isinstance(res, TaskReject):
            out[(lv, p)] = res
            continue
        hidden = ({h: results.get(f"{lv}:{p}:h{h}") for h in hidden_batches(sh.size[sh.batch_axis])}
                  if sh.batch_axis else {})
        try:
            out[(lv, p)] = task_card(lv, p, tasks[(lv, p)], sh, res, hidden)
        except Exception as e:  # noqa: BLE001 - the family classifier parses hostile text too: one task fails
            out[(lv, p)] = TaskReject("bad_reference", f"{type(e).__name__}: {str(e)[:120]}")
    return out


def _probe_inputs(sh: ModuleShape, rebind: dict[str, int] | None = None) -> list[dict]:
    from types import SimpleNamespace

    from grader.inputs import resolve_specs

    return resolve_specs(SimpleNamespace(inputs=sh.inputs), {**sh.size, **(rebind or {})})


def _output_axes(public: ProbeResult, axis: str, b: int, hidden: dict[int, Any]) -> tuple[str | int, ...] | str:
    """The output shape over the batch axis, from the probes at the public and the hidden batches; a str says
    why there is none (a dimension that neither stays nor follows the batch, a probe that failed)."""
    for h, r in hidden.items():
        if not isinstance(r, ProbeResult):
            return f"the reference failed at {axis}={h} ({getattr(r, 'reason', 'no probe result')[:80]})"
        if len(r.shape) != len(public.shape) or r.dtype != public.dtype:
            return f"its output at {axis}={h} has another rank or dtype"
    dims: list[str | int] = []
    for i, d in enumerate(public.shape):
        if d == b and all(r.shape[i] == h for h, r in hidden.items()):
            dims.append(axis)
        elif all(r.shape[i] == d for r in hidden.values()):
            dims.append(int(d))
        else:
            return f"output dimension {i} ({d}) neither stays nor follows {axis}"
    return tuple(dims)
