"""KernelBench modules as tasks, and KernelBench run folders as attempts.

A KernelBench task is a Python module: `class Model`, `get_inputs()` building random inputs at
the task's one size, `get_init_inputs()` giving the constructor arguments. We read its inputs
*statically* (the AST of `get_inputs`, module constants folded by a tiny evaluator that knows
numbers, tuples and arithmetic only), so importing never runs corpus code in our process. The
output's shape and dtype (and the FLOPs that decide whether the task fits a CPU profile) come
from running the reference once in a separate, resource-limited interpreter on the `meta` device
(shapes only, no data, no GPU; a real CPU run only for small references that read values).

A run folder is what KernelBench's scripts write: `level_{L}_problem_{P}_sample_{S}_kernel.py`
per generated kernel, `generation_config.yaml` (model, backend), and `eval_results.json` mapping
problem id -> result (older scripts: one dict per problem; newer: a list of per-sample dicts with
`sample_id, compiled, correctness, metadata, runtime, runtime_stats`). References are not in a
run folder; pass a KernelBench problems folder (`level1/1_Name.py`, ...) alongside to get cards.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import math
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from grader.adapters import kernelbench_reference_source
from grader.contract import MAX_SOURCE_BYTES
from grader.taskcard import DTYPE_BYTES, InputSpec, TaskCard
from pipelines.importers import (ImportBatch, TaskReject, admit, id_part, problems_of, quarantine, sha256_hex,
                                 type_problem)
from pipelines.core.rawattempt import Quarantined, RawAttempt

try:  # another module owns families and ids; fall back to the same scheme when it is absent
    from pipelines.curation.families import classify_kernelbench, kernelbench_task_id
except ImportError:  # pragma: no cover - exercised only before pipelines/curation/families.py existed
    classify_kernelbench = None

    def kernelbench_task_id(level: int, task_id: int) -> str:
        return f"kernelbench_L{int(level)}_{int(task_id):03d}"

FORMAT = "kernelbench"
HIDDEN_SIZES_NOTE = ("KernelBench tasks declare one size through get_inputs(); hidden sizes rebind the "
                     "batch axis where only get_inputs uses it: ")
CPU_FLOP_BUDGET = 2e9
"""A task gets a `cpu` profile only when one reference call needs at most this many FLOPs ..."""
CPU_BYTE_BUDGET = 64 << 20
"""... and its inputs plus output fit in this many bytes."""
MAX_DIM = 1 << 31
_DTYPES = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
           "bool": "bool"}
_ELEM = DTYPE_BYTES
_IN_ELEM = {**_ELEM, "bool": 1}
_NOOP_METHODS = {"contiguous", "cuda", "float"}


class _Unknown(Exception):
    """An expression the static evaluator does not fold."""


# ---- a static evaluator for module constants -------------------------------------------------

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift,  # `COLS = 1 << 18`
}


_SEQ = (tuple, list, str)


def _small(v: Any) -> Any:
    """Refuse values that could only come from hostile arithmetic (huge ints, long sequences)."""
    if isinstance(v, int) and abs(v) > 1 << 62 or isinstance(v, _SEQ) and len(v) > 4096:
        raise _Unknown("value out of range")
    return v


def _fold(node: ast.AST, env: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool, str, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        out: list[Any] = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                inner = _fold(e.value, env)
                if not isinstance(inner, (tuple, list)):
                    raise _Unknown("starred non-sequence")
                out.extend(inner)
            else:
                out.append(_fold(e, env))
        return _small(tuple(out) if isinstance(node, ast.Tuple) else out)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _fold(node.operand, env)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _fold(node.left, env), _fold(node.right, env)
        if isinstance(a, _SEQ) or isinstance(b, _SEQ):
            repeat = b if isinstance(a, _SEQ) else a
            if not (isinstance(node.op, ast.Add) and type(a) is type(b) or isinstance(node.op, ast.Mult)
                    and type(repeat) is int and 0 <= repeat <= 64):
                raise _Unknown("sequence arithmetic")
        elif not all(type(x) in (int, float) for x in (a, b)):
            raise _Unknown("arithmetic on non-numbers")
        elif isinstance(node.op, ast.Pow) and not (type(b) is int and 0 <= b <= 64 and abs(a) <= 1 << 16):
            raise _Unknown("power out of range")
        elif isinstance(node.op, (ast.LShift, ast.RShift)) and not (type(a) is int and type(b) is int and 0 <= b <= 62):
            raise _Unknown("shift out of range")
        try:
            return _small(_BINOPS[type(node.op)](a, b))
        except (TypeError, ZeroDivisionError, OverflowError, ValueError):
            raise _Unknown("arithmetic") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float") \
            and len(node.args) == 1 and not node.keywords:
        v = _fold(node.args[0], env)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            try:
                return _small(int(v) if node.func.id == "int" else float(v))
            except (OverflowError, ValueError):
                raise _Unknown("conversion") from None
    raise _Unknown(type(node).__name__)


def _module_env(tree: ast.Module) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            _bind(stmt.targets, stmt.value, env)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            _bind([stmt.target], stmt.value, env)
    return env


def _bind(targets: list[ast.expr], value: ast.expr, env: dict[str, Any]) -> None:
    try:
        v = _fold(value, env)
    except _Unknown:
        v = _Unknown
    for t in targets:
        if isinstance(t, ast.Name):
            if v is _Unknown:
                env.pop(t.id, None)
            else:
                env[t.id] = v
        elif isinstance(t, (ast.Tuple, ast.List)):
            names = [e.id for e in t.elts if isinstance(e, ast.Name)]
            ok = v is not _Unknown and isinstance(v, (tuple, list)) and len(v) == len(t.elts) == len(names)
            for i, n in enumerate(names):
                if ok:
                    env[n] = v[i]
                else:
                    env.pop(n, None)



# ---- output probe: run the reference on the meta device, in a separate interpreter ------------

@dataclass(frozen=True)
class ProbeResult:
    """Output of one reference call, measured on the meta device (shapes only)."""

    shape: tuple[int, ...]
    """Output tensor shape."""
    dtype: str
    """Output dtype name (`float32`, ...)."""
    flops: int | None
    """FLOPs torch's flop counter attributes to one call (None when unknown)."""
    init_inputs: str | None = None
    """Python literal text of what `get_init_inputs()` returned (None when it is not plain literals)."""
    own_inputs: tuple | None = None
    """What the task's own `get_inputs()` returned, when the probe ran it: per value {shape, dtype} of a tensor,
    {scalar} of a plain number, {other} of anything else."""


_PROBE = r"""
import json, signal, sys
real_stdout, sys.stdout = sys.stdout, sys.stderr  # corpus prints must not corrupt our replies
import torch
from torch.utils.flop_counter import FlopCounterMode

SHAPE_ONLY = []

def _recurrent_meta(self, x, hx=None):
    # On meta, recurrent layers decompose per time step in Python (minutes for KernelBench's
    # LSTMs): a shape rule from the layer's documented layout replaces the run, FLOPs unknown.
    if x.device.type != "meta":
        return _RNN_FORWARD[type(self)](self, x, hx)
    SHAPE_ONLY.append(type(self).__name__)
    d = 2 if self.bidirectional else 1
    h_out = getattr(self, "proj_size", 0) or self.hidden_size
    batched = x.dim() == 3
    n = x.shape[0 if self.batch_first else 1] if batched else None
    out = torch.empty(*x.shape[:-1], d * h_out, dtype=x.dtype, device="meta")
    state = (d * self.num_layers,) + ((n,) if batched else ())
    h = torch.empty(*state, h_out, dtype=x.dtype, device="meta")
    if isinstance(self, torch.nn.LSTM):
        return out, (h, torch.empty(*state, self.hidden_size, dtype=x.dtype, device="meta"))
    return out, h

_RNN_FORWARD = {c: c.forward for c in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)}
for c in _RNN_FORWARD:
    c.forward = _recurrent_meta

def _timeout(*_):
    raise TimeoutError("probe timed out")

OWN_INPUTS = []

def _own_inputs(ns, device):
    # the task's own get_inputs, seeded as a grade seeds it, on the CPU (then as meta tensors on meta)
    torch.manual_seed(0)
    values = list(ns["get_inputs"]())
    OWN_INPUTS[:] = [{"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} if type(v) is torch.Tensor
                     else {"scalar": v} if type(v) in (int, float, bool) else {"other": type(v).__name__}
                     for v in values]
    if device == "meta":
        return [torch.empty_like(v, device="meta") if type(v) is torch.Tensor else v for v in values]
    return values

def _inputs(specs, device):
    # the grader's own sampler (its source heads this program), so the probe sees what a grade will
    if device != "meta":
        return make_inputs(specs, 0, device)
    return [make_inputs([s], 0, "cpu")[0] if s["dist"] == "scalar"
            else torch.empty(s["shape"], dtype=getattr(torch, s["dtype"]), device="meta") for s in specs]

def _literal_text(value):
    import ast
    try:
        text = repr(value)
        return text if len(text) <= 4096 and ast.literal_eval(text) == value else None
    except Exception:
        return None

def _run(job, device):
    ns = {"__name__": "kernelbench_reference"}
    exec(compile(job["code"], "<reference>", "exec"), ns)
    SHAPE_ONLY.clear()
    with torch.device(device), torch.no_grad():
        torch.manual_seed(0)
        init = list(ns["get_init_inputs"]())
        init_text = _literal_text(init)
        model = ns["Model"](*init)
    with torch.no_grad():  # a task's own inputs are made on the CPU, outside the meta device
        inputs = _own_inputs(ns, device) if job["inputs"] == "task" else None
    with torch.device(device), torch.no_grad():
        if inputs is None:
            inputs = _inputs(job["inputs"], device)
        with FlopCounterMode(display=False) as counter:
            out = model(*inputs)
    return out, None if SHAPE_ONLY else int(counter.get_total_flops()), init_text

with FlopCounterMode(display=False):  # warm up outside any task's clock
    torch.ones(2, 2) @ torch.ones(2, 2)
signal.signal(signal.SIGALRM, _timeout)
for line in sys.stdin:
    job = json.loads(line)
    res = {"key": job["key"]}
    try:
        signal.alarm(job["timeout_s"])
        try:
            out, flops, init = _run(job, "meta")
        except (RuntimeError, NotImplementedError) as e:  # data-dependent code cannot run on meta
            if "meta" not in str(e) or job["cpu_bytes"] > job["cpu_bytes_max"]:
                raise
            signal.alarm(job["timeout_s"])
            out, flops, init = _run(job, "cpu")
        if type(out) is torch.Tensor:
            res.update(shape=list(out.shape), dtype=str(out.dtype).replace("torch.", ""), flops=flops,
                       init_inputs=init, **({"own_inputs": OWN_INPUTS} if job["inputs"] == "task" else {}))
        else:
            res.update(code="multi_output", error=f"forward returns {type(out).__name__}, not one tensor")
    except BaseException as e:
        res.update(code="probe_failed", error=f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        signal.alarm(0)
    real_stdout.write(json.dumps(res) + "\n")
    real_stdout.flush()
"""
PROBE_TASK_TIMEOUT_S = 60
PROBE_CPU_BYTES_MAX = 256 << 20
"""A reference that cannot run on `meta` is run once on real CPU inputs only up to this size."""
PROBE_MEMORY_MB = 8192
PROBE_FILE_MB = 16


def _prod(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _probe_program() -> str:
    """The probe, headed by the source of `grader.inputs` (stdlib and torch only): inputs are drawn by
    the same sampler as in a grade, never by the task's own `get_inputs`."""
    import inspect

    from grader import inputs

    return inspect.getsource(inputs) + "\n" + _PROBE


def probe_outputs(jobs: dict[str, tuple[str, list]]) -> dict[str, ProbeResult | TaskReject]:
    """Probe each job (reference code, resolved input specs as `grader.inputs.resolve_specs` makes them)
    in the grader's sandbox.

    Never raises.

    The reference is corpus code: it runs only in `grader.confine`'s sandboxed child (no GPU, no
    network, the checkout and the host's other files hidden, an unprivileged uid, private /tmp,
    /proc and IPC, a scrubbed environment, an address-space cap) under a per-task alarm. If the
    child dies mid-way, the task it was on is marked failed and the rest are retried in a new one.
    """
    from grader.confine import run_confined

    out: dict[str, ProbeResult | TaskReject] = {}
    pending = list(jobs)
    while pending:
        payload = "".join(json.dumps({
            "key": k, "code": jobs[k][0], "inputs": jobs[k][1], "timeout_s": PROBE_TASK_TIMEOUT_S,
            "cpu_bytes_max": PROBE_CPU_BYTES_MAX,
            "cpu_bytes": (PROBE_CPU_BYTES_MAX + 1 if jobs[k][1] == "task" else  # unknown until it has run
                          sum(_prod(s["shape"]) * _IN_ELEM.get(s["dtype"], 8) for s in jobs[k][1]))}) + "\n"
            for k in pending)
        run = run_confined(_probe_program(), payload.encode(), 60 + PROBE_TASK_TIMEOUT_S * len(pending),
                           memory_mb=PROBE_MEMORY_MB, fsize_mb=PROBE_FILE_MB)
        stdout = run.stdout
        note = ("probe interpreter timed out" if run.timed_out
                else f"probe exited with {run.returncode}: {run.stderr[-300:]!r}")
        for line in stdout.decode("utf-8", "replace").splitlines():
            try:
                res = json.loads(line)
                key = res["key"]
            except (ValueError, KeyError, TypeError):
                continue
            if key in jobs and key not in out:
                out[key] = (ProbeResult(tuple(int(d) for d in res["shape"]), res["dtype"], res.get("flops"),
                                        _checked_literal(res.get("init_inputs")), _own_specs(res.get("own_inputs")))
                            if "shape" in res else TaskReject(res.get("code", "probe_failed"), res.get("error", "")))
        left = [k for k in pending if k not in out]
        if left:  # the child works in order, so the first task without an answer is the one it died on
            out[left[0]] = TaskReject("probe_failed", note)
        pending = left[1:]
    for k, v in list(out.items()):
        if isinstance(v, ProbeResult) and v.dtype not in _ELEM:
            out[k] = TaskReject("unsupported_dtype", f"output dtype {v.dtype} is not one of {sorted(_ELEM)}")
    return out

def _own_specs(seen: Any) -> tuple | None:
    """The probe's account of a task's own inputs as a tuple of dicts (None where it sent none)."""
    if not isinstance(seen, list):
        return None
    return tuple(dict(v) for v in seen if isinstance(v, dict))


def _own_input_specs(probe: ProbeResult) -> tuple[InputSpec, ...]:
    """Documentary specs of a task's own inputs (shapes and dtypes as the probe saw them; `dist="task"`);
    TaskReject where one is neither a tensor of a dtype we carry nor a plain number."""
    specs = []
    for i, v in enumerate(probe.own_inputs or ()):
        if "scalar" in v and isinstance(v["scalar"], (int, float)):
            specs.append(_scalar(f"in{i}", v["scalar"], i))
        elif v.get("dtype") in _IN_ELEM and isinstance(v.get("shape"), list):
            specs.append(InputSpec(f"in{i}", tuple(int(d) for d in v["shape"]), v["dtype"], dist="task"))
        else:
            raise TaskReject("non_tensor_input", f"get_inputs returns {v.get('other') or v.get('dtype')!s} at "
                                                 f"position {i}: tensors of {sorted(_IN_ELEM)} and numbers only")
    if not specs:
        raise TaskReject("probe_failed", "the probe did not see what get_inputs returns")
    return tuple(specs)


def _checked_literal(text: Any) -> str | None:
    """The probe's literal text re-read here (the probe ran corpus code): a list, in canonical form."""
    if not isinstance(text, str) or len(text) > 4096:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return None
    return repr(value) if isinstance(value, list) else None

# ---- get_inputs / get_init_inputs -------------------------------------------------------------

@dataclass(frozen=True)
class ModuleShape:
    """What a KernelBench module declares, read without running it."""

    inputs: tuple[InputSpec, ...]
    """One spec per tensor `get_inputs()` returns, in order."""
    size: dict[str, int]
    """The module constants used as axes of those shapes (the task's one size)."""
    init_inputs: list[Any] | None
    """Constructor arguments from `get_init_inputs()`, when they fold to plain literals."""
    description: str
    """First line of the `Model` docstring."""
    batch_axis: str | None = None
    """The module constant that is every tensor input's leading dimension and that nothing but get_inputs
    reads (so a hidden size may rebind it), or None."""
    batch_note: str = ""
    """Why there is no batch axis, when there is none."""
    own_inputs: str = ""
    """Why the inputs are not re-expressed as draws, when they are not: then the task's own `get_inputs()` makes
    them (in the grader's sandbox, seeded per call, at the task's own sizes) and `inputs` is empty until the
    probe has seen what it returns."""


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    found = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == name]
    return found[-1] if found else None


def _dtype(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch" \
            and node.attr in _DTYPES:
        return _DTYPES[node.attr]
    raise TaskReject("unsupported_dtype", f"input dtype {ast.unparse(node)[:40]!r} is not one of {sorted(_ELEM)}")


def _dims(args: list[ast.expr], env: dict[str, Any], size: dict[str, int],
          shapes: dict[str, tuple] | None = None) -> tuple[str | int, ...]:
    if len(args) == 1 and isinstance(args[0], ast.Attribute) and args[0].attr == "shape" \
            and isinstance(args[0].value, ast.Name) and args[0].value.id in (shapes or {}):
        return shapes[args[0].value.id]  # torch.randint(0, 2, x.shape): the axes of an earlier input
    if len(args) == 1 and not isinstance(args[0], ast.Starred):
        try:
            v = _fold(args[0], env)
        except _Unknown:
            v = None
        if isinstance(v, (tuple, list)):  # torch.randn((a, b)) or torch.randn(shape)
            args = [ast.Constant(int(d)) if isinstance(d, int) else ast.Constant(None) for d in v]
    dims: list[str | int] = []
    for a in args:
        try:
            v = _fold(a.value if isinstance(a, ast.Starred) else a, env)
        except _Unknown as e:
            raise TaskReject("inputs_not_expressible",
                             f"shape entry {ast.unparse(a)[:40]!r} does not fold ({e})") from None
        vals = list(v) if isinstance(a, ast.Starred) and isinstance(v, (tuple, list)) else [v]
        for d in vals:
            if isinstance(d, bool) or not isinstance(d, int) or not 0 < d < MAX_DIM:
                raise TaskReject("inputs_not_expressible", f"shape entry {d!r} is not a positive integer")
            if isinstance(a, ast.Name):
                size[a.id] = d
                dims.append(a.id)
            else:
                dims.append(d)
    return tuple(dims)


def _tensor_spec(node: ast.expr, name: str, env: dict[str, Any], size: dict[str, int],
                 shapes: dict[str, tuple] | None = None) -> InputSpec:
    dtype_override = None
    while (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args
           and not node.keywords and node.func.attr in _NOOP_METHODS):
        dtype_override = dtype_override or ("float32" if node.func.attr == "float" else None)
        node = node.func.value
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
            and node.func.attr in ("randn", "rand", "randint")):
        raise TaskReject("inputs_not_expressible",
                         f"input {name} = {ast.unparse(node)[:60]!r} is not torch.randn/rand/randint")
    kind = node.func.attr
    kw = {k.arg: k.value for k in node.keywords}
    if None in kw or set(kw) - {"dtype", "device", "requires_grad", "size", "low", "high"}:
        raise TaskReject("inputs_not_expressible", f"input {name}: unsupported keywords {sorted(map(str, kw))}")
    dtype = _dtype(kw["dtype"]) if "dtype" in kw else ("int64" if kind == "randint" else "float32")
    dtype = dtype_override or dtype
    if kind == "randint":
        pos = list(node.args)
        shape_node = kw.get("size") or (pos.pop() if pos else None)
        bounds = pos + [kw[k] for k in ("low", "high") if k in kw]
        if shape_node is None or len(bounds) not in (1, 2):
            raise TaskReject("inputs_not_expressible", f"input {name}: randint needs (low,) high and size")
        try:
            lo, hi = ([0] + [_fold(b, env) for b in bounds])[-2:]
        except _Unknown as e:
            raise TaskReject("inputs_not_expressible", f"input {name}: randint bounds do not fold ({e})") from None
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in (lo, hi)) or not lo < hi:
            raise TaskReject("inputs_not_expressible", f"input {name}: randint bounds {lo!r}..{hi!r}")
        return InputSpec(name, _dims([shape_node], env, size, shapes), dtype, "randint", low=float(lo), high=float(hi))
    shape = _dims(list(node.args) or ([kw["size"]] if "size" in kw else []), env, size)
    if not shape:
        raise TaskReject("inputs_not_expressible", f"input {name}: no shape")
    if kind == "rand":
        return InputSpec(name, shape, dtype, "uniform", low=0.0, high=1.0)
    return InputSpec(name, shape, dtype, "normal")


class _RandScalar:
    """`scale = torch.rand(())` in get_inputs: a random number a later input is multiplied by."""


def _is_torch_call(node: ast.expr, names: tuple[str, ...]) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch")


def _number(node: ast.expr, env: dict[str, Any]) -> float | None:
    try:
        v = _fold(node, env)
    except _Unknown:
        return None
    return float(v) if type(v) in (int, float) else None


def _with_step(spec: InputSpec, step: str) -> InputSpec:
    return dataclasses.replace(spec, post=spec.post + (step,))


def _affine(spec: InputSpec, a: float, b: float) -> InputSpec:
    """x -> a*x + b, folded into a trailing affine step (`randint(0, 2, n).float() * 2 - 1`)."""
    if spec.post and spec.post[-1].startswith("affine:"):
        _, a0, b0 = spec.post[-1].split(":")
        a, b = float(a0) * a, float(b0) * a + b
        spec = dataclasses.replace(spec, post=spec.post[:-1])
    dtype = spec.dtype if spec.dtype in ("float32", "float16", "bfloat16") else "float32"
    return dataclasses.replace(spec, dtype=dtype, post=spec.post + (f"affine:{a!r}:{b!r}",))


def _recipe(node: ast.expr, name: str, env: dict[str, Any], size: dict[str, int], local: dict[str, Any]) -> InputSpec:
    """One input of get_inputs as a seeded draw plus steps of `grader.inputs.POST_STEPS`; TaskReject when
    the expression is outside what those express (the reason names the expression)."""
    shapes = {k: v.shape for k, v in local.items() if isinstance(v, InputSpec)}
    if isinstance(node, ast.Name) and isinstance(local.get(node.id), InputSpec):
        return dataclasses.replace(local[node.id], name=name)
    if _is_torch_call(node, ("triu", "tril")) and len(node.args) == 1 and not node.keywords:
        return _with_step(_recipe(node.args[0], name, env, size, local), node.func.attr)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and not _is_torch_call(node, ("randn", "rand", "randint")):
        method, base, args, kw = node.func.attr, node.func.value, node.args, {k.arg: k.value for k in node.keywords}
        if method in ("triu", "tril") and not args and not kw:
            return _with_step(_recipe(base, name, env, size, local), method)
        if method == "softmax" and len(args) + len(kw) == 1 and set(kw) <= {"dim"}:
            dim = _number((args or [kw.get("dim")])[0], env)
            if dim is not None and dim == int(dim):
                return _with_step(_recipe(base, name, env, size, local), f"softmax:{int(dim)}")
        if method in ("bool", "float") and not args and not kw:
            inner = _recipe(base, name, env, size, local)
            if method == "float":
                return dataclasses.replace(inner, dtype="float32")
            if inner.dist == "randint" and inner.low >= 0 and not inner.post:
                return dataclasses.replace(inner, dtype="bool")
        if method in _NOOP_METHODS and not args and not kw:
            return _recipe(base, name, env, size, local)
    if isinstance(node, ast.BinOp):
        left, right = node.left, node.right
        if isinstance(node.op, ast.Div) and _number(right, env) == 2.0 and isinstance(left, ast.BinOp) \
                and isinstance(left.op, ast.Add) and isinstance(left.left, ast.Name) \
                and isinstance(left.right, ast.Attribute) and left.right.attr in ("T", "mT") \
                and isinstance(left.right.value, ast.Name) and left.right.value.id == left.left.id:
            return _with_step(_recipe(left.left, name, env, size, local), "sym")  # (A + A.T) / 2
        for tensor, other in ((left, right), (right, left)):
            if isinstance(other, ast.Name) and local.get(other.id) is _RandScalar and isinstance(node.op, ast.Mult):
                return _with_step(_recipe(tensor, name, env, size, local), "scale:0.0:1.0")
        c = _number(right, env)
        if c is not None and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)) and (c or not isinstance(
                node.op, ast.Div)):
            a, b = {ast.Add: (1.0, c), ast.Sub: (1.0, -c), ast.Mult: (c, 0.0), ast.Div: (1.0 / c if c else 0.0, 0.0)}[
                type(node.op)]
            return _affine(_recipe(left, name, env, size, local), a, b)
        c = _number(left, env)
        if c is not None and isinstance(node.op, (ast.Add, ast.Mult)):
            return _affine(_recipe(right, name, env, size, local), *((1.0, c) if isinstance(node.op, ast.Add)
                                                                     else (c, 0.0)))
    return _tensor_spec(node, name, env, size, shapes)


def _rand_scalar(node: ast.expr, env: dict[str, Any]) -> bool:
    """`torch.rand(())` (or `torch.rand([])`): one uniform number in [0, 1)."""
    if not (_is_torch_call(node, ("rand",)) and len(node.args) == 1 and not node.keywords):
        return False
    try:
        return _fold(node.args[0], env) in ((), [])
    except _Unknown:
        return False


def analyse_module(code: str) -> ModuleShape:
    """Read a KernelBench module's inputs, size and init arguments; raise TaskReject if unsure."""
    try:
        return _analyse(code)
    except TaskReject:
        raise
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, UnicodeError) as e:
        # hostile sources: NUL bytes, surrogates, nesting deeper than the parser or our folding allow
        raise TaskReject("bad_reference", f"reference cannot be read: {type(e).__name__}: {str(e)[:100]}") from None


def _analyse(code: str) -> ModuleShape:
    tree = ast.parse(code)
    model = next((s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"), None)
    fn = _function(tree, "get_inputs")
    if model is None or fn is None:
        raise TaskReject("bad_reference", "reference lacks class Model or get_inputs()")
    _refuse_state(model)
    try:
        return _drawn(tree, model, fn)
    except TaskReject as r:
        if r.code != "inputs_not_expressible":
            raise
        # Not expressible as seeded draws: the task's own get_inputs makes them, at its own size only.
        return ModuleShape((), {}, _init_inputs(tree, _module_env(tree)), _doc(model), None,
                           "inputs made by the task's own get_inputs", own_inputs=r.reason)


def _drawn(tree: ast.Module, model: ast.ClassDef, fn: ast.FunctionDef) -> ModuleShape:
    """The module's inputs as seeded draws plus steps (`grader.inputs`); TaskReject where they are not that."""
    env, size = _module_env(tree), {}
    local: dict[str, Any] = {}
    specs: list[InputSpec] | None = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            tname = stmt.targets[0].id
            try:
                env[tname] = _fold(stmt.value, env)
            except _Unknown:
                env.pop(tname, None)
                local[tname] = _RandScalar if _rand_scalar(stmt.value, env) else _recipe(stmt.value, tname, env,
                                                                                        size, local)
            continue
        if isinstance(stmt, ast.Return) and isinstance(stmt.value, (ast.List, ast.Tuple)):
            specs = []
            for i, e in enumerate(stmt.value.elts):
                if isinstance(e, ast.Name) and isinstance(local.get(e.id), InputSpec):
                    specs.append(local[e.id])
                elif isinstance(e, ast.Name) and e.id in env or isinstance(e, ast.Constant):
                    specs.append(_scalar(e.id if isinstance(e, ast.Name) else f"in{i}", _fold(e, env), i))
                else:
                    specs.append(_recipe(e, f"in{i}", env, size, local))
            break
        raise TaskReject("inputs_not_expressible", f"get_inputs has a {type(stmt).__name__} statement")
    if not specs:
        raise TaskReject("inputs_not_expressible", "get_inputs returns no list of tensors")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        specs = [InputSpec(**{**s.__dict__, "name": f"in{i}"}) for i, s in enumerate(specs)]
    axis, why = _batch_axis(tree, fn, specs)
    return ModuleShape(tuple(specs), size, _init_inputs(tree, env), _doc(model), axis, why)


def _refuse_state(model: ast.ClassDef) -> None:
    """A forward that assigns to `self` carries state from call to call (an RNN's hidden state): the grader
    calls a candidate many more times than the reference, so the two could never be compared."""
    for fn in (s for s in model.body if isinstance(s, ast.FunctionDef) and s.name == "forward"):
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                        and not _moved_only(t.attr, node):
                    raise TaskReject("stateful_reference", f"Model.forward assigns self.{t.attr}: the reference keeps "
                                     "state from call to call, and a candidate called as often as grading needs "
                                     "would drift from it (H200 run 20, CUDA-L1 L3:T34)")


def _moved_only(attr: str, node: ast.AST) -> bool:
    """`self.h0 = self.h0.to(x.device)` (or `.cuda()`, `.contiguous()`; KernelBench's LSTMs also write
    `self.c0 = self.h0.to(x.device)`): an attribute's values, moved, the same in every call; not state."""
    value = getattr(node, "value", None)
    return (isinstance(node, ast.Assign) and isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and value.func.attr in ("to", "cuda", "contiguous") and isinstance(value.func.value, ast.Attribute)
            and isinstance(value.func.value.value, ast.Name) and value.func.value.value.id == "self")


def _batch_axis(tree: ast.Module, get_inputs: ast.FunctionDef, specs: list[InputSpec]) -> tuple[str | None, str]:
    """(axis, "") when one module constant leads every tensor input and is read nowhere but in get_inputs
    (the reference, its constructor arguments and other constants never see it), else (None, why)."""
    tensors = [s for s in specs if s.dist != "scalar"]
    leads = {s.shape[0] if s.shape else None for s in tensors}
    if len(leads) != 1 or not isinstance(next(iter(leads)), str):
        return None, "its tensor inputs share no leading size constant"
    axis = next(iter(leads))
    inside = {id(n) for n in ast.walk(get_inputs)}
    if any(isinstance(n, ast.Name) and n.id == axis and isinstance(n.ctx, ast.Load) and id(n) not in inside
           for n in ast.walk(tree)):
        return None, f"{axis} is read outside get_inputs"
    return axis, ""


def hidden_batches(b: int) -> list[int]:
    """Sealed values of a batch axis the agent saw at `b`: half of it, and one less (an odd or unaligned
    count), never more (the float64 reference pays for every element)."""
    return sorted({max(1, b // 2), b - 1} - {b, 0})


def _scalar(name: str, value: Any, i: int) -> InputSpec:
    """A number get_inputs passes as it is (`s = 3.14; return [A, s]`): the same number in every call."""
    if type(value) not in (int, float):
        raise TaskReject("non_tensor_input", f"get_inputs returns {type(value).__name__} {str(value)[:40]!r} at "
                         f"position {i}; only tensors and plain numbers are supported")
    return InputSpec(name, (), "int64" if type(value) is int else "float32", "scalar", low=float(value))


def _init_inputs(tree: ast.Module, env: dict[str, Any]) -> list[Any] | None:
    fn = _function(tree, "get_init_inputs")
    if fn is None:
        return []
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        return None
    try:
        v = _fold(body[0].value, env)
    except _Unknown:
        return None
    return list(v) if isinstance(v, (list, tuple)) else None


def _doc(cls: ast.ClassDef) -> str:
    doc = (ast.get_docstring(cls) or "").strip().splitlines()
    return doc[0][:200] if doc else ""


def _numel(spec_shape: Iterable[str | int], size: dict[str, int]) -> int:
    return _prod(size[d] if isinstance(d, str) else d for d in spec_shape)


def task_card(level: int, problem: int, ref_code: str, shape: ModuleShape, probe: ProbeResult,
              hidden: dict[int, Any] | None = None) -> TaskCard:
    """The card of one KernelBench task: its own size public, hidden sizes where its batch axis may be rebound
    (`hidden`: hidden batch -> probe result there), PyTorch eager as its expert."""
    if shape.own_inputs:
        shape = dataclasses.replace(shape, inputs=_own_input_specs(probe))
    in_bytes = sum(_numel(s.shape, shape.size) * _IN_ELEM[s.dtype] for s in shape.inputs if s.dist != "scalar")
    out_numel = _prod(probe.shape)
    axis = shape.batch_axis
    out_axes = _output_axes(probe, axis, shape.size[axis], hidden or {}) if axis and hidden else (
        shape.batch_note or "no hidden batch")
    hidden_sizes = [dict(shape.size, **{axis: h}) for h in sorted(hidden or {})] if not isinstance(out_axes, str) else []
    family = classify_kernelbench(ref_code, level).value if classify_kernelbench else f"kernelbench_L{level}"
    reference = kernelbench_reference_source(ref_code)
    cpu_ok = (probe.flops is not None and probe.flops <= CPU_FLOP_BUDGET
              and in_bytes + out_numel * _ELEM[probe.dtype] <= CPU_BYTE_BUDGET)
    in_expr = " + ".join(f"{'*'.join(map(str, s.shape)) or 1} * {_IN_ELEM[s.dtype]}"
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
        hidden_sizes={"gpu": tuple(hidden_sizes), **({"cpu": tuple(hidden_sizes)} if cpu_ok else {})} if hidden_sizes else {},
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


def language_of(code: str) -> str:
    """`cuda` for modules compiling C++/CUDA through torch's extension loader, `triton`, else `pytorch`."""
    if "load_inline" in code or "cpp_extension" in code:
        return "cuda"
    return "triton" if "triton.jit" in code else "pytorch"


# ---- run folders ---------------------------------------------------------------------------

KERNEL_FILE = re.compile(r"^level_(\d{1,2})_problem_(\d{1,5})_sample_(\d{1,6})_kernel\.py$")
PROBLEM_FILE = re.compile(r"^(\d{1,5})_[^/]*\.py$")
AGENT = "kernelbench"
MAX_CONFIG_BYTES = 64 << 10
MAX_EVAL_BYTES = 64 << 20
MAX_KERNEL_BYTES = 4 * MAX_SOURCE_BYTES


@dataclass(frozen=True)
class RunFolder:
    """One run folder as names plus an on-demand reader (so kernels are read one at a time)."""

    label: str
    """Run name used inside attempt ids."""
    origin: str
    """Folder path, prefix of every origin."""
    names: tuple[str, ...]
    """File names in the folder."""
    read: Callable[[str], bytes | None]
    """Bytes of one file, at most MAX_KERNEL_BYTES + 1 of them (None when unreadable)."""
    config: dict[str, Any]
    """generation_config.yaml as a dict ({} when absent or unreadable)."""
    eval_raw: bytes | None
    """eval_results.json bytes (None when absent)."""


def _folder(d: Path) -> RunFolder:
    def read(name: str, limit: int = MAX_KERNEL_BYTES + 1) -> bytes | None:
        try:
            with open(d / name, "rb") as f:
                return f.read(limit)
        except OSError:
            return None

    names = tuple(sorted(f.name for f in d.iterdir() if f.is_file()))
    ev = read("eval_results.json", MAX_EVAL_BYTES + 1) if "eval_results.json" in names else None
    return RunFolder(id_part(d.name), str(d), names, read, _config(read("generation_config.yaml", MAX_CONFIG_BYTES)
                                                                   if "generation_config.yaml" in names else None), ev)


def _config(raw: bytes | None) -> dict[str, Any]:
    import yaml

    try:
        cfg = yaml.safe_load(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def parse_eval_results(raw: bytes, where: str) -> tuple[dict[tuple[int, int], tuple[str, dict]], list[Quarantined]]:
    """(problem, sample) -> (origin, entry) from eval_results.json (old: a dict per problem; new: a
    list of per-sample dicts), plus the entries that had to be refused."""
    rejected: list[Quarantined] = []
    try:
        if len(raw) > MAX_EVAL_BYTES:
            raise ValueError(f"over {MAX_EVAL_BYTES} bytes")
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError(f"top level is {type(doc).__name__}, not an object")
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return {}, [quarantine(where, None, "bad_json", f"eval_results.json unreadable: {str(e)[:120]}", raw)]
    out: dict[tuple[int, int], tuple[str, dict]] = {}
    for pid, value in doc.items():
        for i, entry in enumerate(value if isinstance(value, list) else [value]):
            at = f"{where}#{id_part(pid, 20)}[{i}]"
            sid = entry.get("sample_id") if isinstance(entry, dict) else None
            text = _dump(entry)
            if not (pid.isdigit() and pid.isascii() and len(pid) <= 5) or isinstance(sid, bool) \
                    or not isinstance(sid, int) or not 0 <= sid < 10**6:
                rejected.append(quarantine(at, None, "bad_type", "an eval entry needs a numeric problem id "
                                           "and an integer sample_id", text))
            elif (int(pid), sid) in out:
                rejected.append(quarantine(at, None, "duplicate_claim", f"problem {pid} sample {sid} "
                                           "evaluated twice; the first entry is kept", text))
            else:
                out[(int(pid), sid)] = (at, entry)
    return out, rejected


def _dump(v: Any) -> str:
    try:
        return json.dumps(v, default=str)[:200]
    except (ValueError, RecursionError):
        return repr(type(v))


def _eval_claim(where: str, entry: dict, aid: str, admitted: bool, task_id: str, run: str) -> dict[str, Any]:
    """What one eval entry claims; a field of the wrong type is kept as null and named in the claim's
    `unreadable_fields` (never silently null: the import says them)."""
    unreadable: dict[str, str] = {}

    def problem(name: str, value: Any, wanted: str) -> None:
        unreadable[name] = type_problem(value, wanted)

    def flag(name: str) -> bool | None:
        v = entry.get(name)
        if v is not None and not isinstance(v, bool):
            problem(name, v, "true or false")
            return None
        return v

    def mapping(name: str) -> dict:
        v = entry.get(name)
        if v is not None and not isinstance(v, dict):
            problem(name, v, "an object")
        return v if isinstance(v, dict) else {}

    stats, meta = mapping("runtime_stats"), mapping("metadata")
    kept = {}
    for k, v in stats.items():
        if type(v) in (int, float, str) and len(str(v)) <= 200:
            kept[str(k)[:40]] = v
        else:
            problem(f"runtime_stats.{str(k)[:40]}", v, "a number or a short text")
    hardware = meta.get("hardware") or stats.get("hardware")
    if hardware is not None and not isinstance(hardware, str):
        problem("hardware", hardware, "a GPU name")
        hardware = None
    claim = {
        "source_format": FORMAT, "origin": where, "attempt_id": aid, "attempt_admitted": admitted,
        "task_id": task_id, "run": run, "compiled": flag("compiled"), "correctness": flag("correctness"),
        "runtime_ms": _runtime_ms(entry.get("runtime"), lambda v, wanted: problem("runtime", v, wanted)),
        "runtime_stats": kept, "hardware": (hardware or "")[:200] or None,
    }
    if unreadable:
        claim["unreadable_fields"] = unreadable
    return claim


def _runtime_ms(rt: Any, problem: Callable[[Any, str], None]) -> float | None:
    """A positive finite runtime, or None: KernelBench writes -1 when nothing was timed (no problem then)."""
    if rt is None or rt == -1 and type(rt) in (int, float):
        return None
    if type(rt) not in (int, float) or not math.isfinite(rt) or rt <= 0:
        problem(rt, "a positive number of ms (or -1: not timed)")
        return None
    return float(rt)


@dataclass(frozen=True)
class RunPlan:
    """A run folder's records before any kernel is read."""

    folder: RunFolder
    files: dict[tuple[int, int, int], str]
    """(level, problem, sample) -> kernel file name."""
    bad_names: list[str]
    """`*_kernel.py` files whose name does not parse."""
    level: int | None
    """The run's level (config, else the one level all kernel files share)."""
    evals: dict[tuple[int, int], tuple[str, dict]]
    rejected: list[Quarantined]
    keys: list[tuple[int, int, int]]
    """Every record: kernel files plus eval entries without a file."""


def plan_run(folder: RunFolder) -> RunPlan:
    files: dict[tuple[int, int, int], str] = {}
    bad: list[str] = []
    for name in folder.names:
        m = KERNEL_FILE.match(name)
        if m:
            files[(int(m[1]), int(m[2]), int(m[3]))] = name
        elif name.endswith("_kernel.py"):
            bad.append(name)
    levels = {k[0] for k in files}
    cfg_level = folder.config.get("level")
    level = cfg_level if type(cfg_level) is int and 0 < cfg_level < 100 else (min(levels) if len(levels) == 1 else None)
    evals, rejected = (parse_eval_results(folder.eval_raw, f"{folder.origin}/eval_results.json")
                       if folder.eval_raw is not None else ({}, []))
    if level is None:
        rejected += [quarantine(w, None, "ambiguous_level", "eval entry cannot be tied to a level (no level in "
                                "generation_config.yaml and kernel files of several levels)", "")
                     for w, _ in evals.values()]
        evals = {}
    keys = sorted(set(files) | {(level, p, s) for p, s in evals})
    return RunPlan(folder, files, bad, level, evals, rejected, keys)


def read_run(plan: RunPlan, cards: dict, refs: dict[tuple[int, int], str], seen: set[str],
             ) -> tuple[list[RawAttempt | Quarantined], list[dict[str, Any]]]:
    """One result per record of the plan (kernel files read one at a time) and the eval claims."""
    f = plan.folder
    out: list[RawAttempt | Quarantined] = [
        quarantine(f"{f.origin}/{n}", None, "bad_filename",
                   "kernel file name is not level_{L}_problem_{P}_sample_{S}_kernel.py", n) for n in plan.bad_names]
    claims = []
    for lv, p, s in plan.keys:
        aid = f"kernelbench:{f.label}:L{lv}:P{p}:S{s}"
        where, entry = plan.evals.get((p, s), (None, None)) if lv == plan.level else (None, None)
        name = plan.files.get((lv, p, s))
        rec = _run_attempt(f, name, aid, (lv, p, s), cards.get((lv, p)), refs.get((lv, p)), seen, where)
        out.append(rec)
        if entry is not None:
            claims.append(_eval_claim(where, entry, aid, isinstance(rec, RawAttempt), kernelbench_task_id(lv, p),
                                      f.label))
    return out, claims


def _run_attempt(f: RunFolder, name: str | None, aid: str, key: tuple[int, int, int],
                 card: TaskCard | TaskReject | None, ref: str | None, seen: set[str],
                 eval_where: str | None) -> RawAttempt | Quarantined:
    level, problem, sample = key
    if name is None:
        return quarantine(eval_where or aid, aid, "missing_source", "eval_results.json has an entry but the run "
                          "folder has no kernel file for it; its result is kept as a claim", "")
    where = f"{f.origin}/{name}"
    raw = f.read(name)
    if raw is None:
        return quarantine(where, aid, "unreadable", "kernel file could not be read", "")
    if len(raw) > MAX_KERNEL_BYTES:
        return quarantine(where, aid, "oversized_source", f"kernel file over {MAX_KERNEL_BYTES} bytes", raw)
    try:
        code = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return quarantine(where, aid, "bad_encoding", f"kernel file is not valid UTF-8 (byte {e.start})", raw)
    if not code.strip():
        return quarantine(where, aid, "empty_source", "kernel file is empty", raw)
    if isinstance(card, TaskReject):
        return quarantine(where, aid, "unsupported_task",
                          f"task L{level}/P{problem} cannot be graded ({card.code}: {card.reason})", raw)
    model = f.config.get("model_name")
    if isinstance(model, str):  # config text, not the record: repaired rather than refused
        model = model.encode("utf-8", "replace").decode("utf-8").replace("\x00", "").strip()[:200]
    obj = {
        "attempt_id": aid, "task_id": kernelbench_task_id(level, problem), "agent": AGENT,
        "model": model if isinstance(model, str) and model else "unknown",
        "trajectory_id": aid, "turn": 1, "language": language_of(code), "source": code,
        "entry_point": "ModelNew", "source_format": FORMAT,
        "extra": {"original_sha256": sha256_hex(raw), "run": f.label, "level": level, "problem_id": problem,
                  "sample_id": sample, "eval_origin": eval_where,
                  "generation_config": {k: v for k, v in f.config.items() if k in (
                      "server_type", "backend", "temperature", "max_tokens") and type(v) in (str, int, float)},
                  "init_inputs": init_inputs_of(ref) if ref else None},
    }
    return admit(obj, where, raw, seen)


def init_inputs_of(code: str) -> list[Any] | None:
    """The reference's constructor arguments when they fold statically (for the candidate adapter)."""
    try:
        return analyse_module(code).init_inputs
    except TaskReject:
        return None


def _is_run(d: Path) -> bool:
    """A run folder: KernelBench's eval results, or kernel files named as its scripts name them. A
    `levelN` folder of a problems root is never one, though some task files end in `_kernel.py`
    (`50_conv_standard_2D__square_input__square_kernel.py`): those are tasks, never attempts."""
    if (d / "eval_results.json").is_file() or any(KERNEL_FILE.match(f.name) for f in d.glob("*_kernel.py")):
        return True
    return not re.fullmatch(r"level\d+", d.name) and any(d.glob("*_kernel.py"))


def _is_problems(d: Path) -> bool:
    return any(sub.is_dir() and re.fullmatch(r"level\d+", sub.name) for sub in d.iterdir())


def _classify(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """Run folders and problem roots among the paths and their sub-folders (two levels down)."""
    runs, roots = [], []
    for p in map(Path, paths):
        level1 = sorted(x for x in p.iterdir() if x.is_dir()) if p.is_dir() else []
        for d in [p] + level1 + [x for y in level1 for x in sorted(y.iterdir()) if x.is_dir()]:
            if _is_run(d):
                runs.append(d)
            elif _is_problems(d):
                roots.append(d)
    return runs, roots


def _problems_in(roots: list[Path]) -> set[tuple[int, int]]:
    """(level, problem) of every task file under the problems roots: a root given to the importer is read
    whole, so its tasks become cards whether or not a run folder has attempts at them."""
    found = set()
    for root in roots:
        for d in sorted(root.iterdir()):
            m = re.fullmatch(r"level(\d+)", d.name)
            if m and d.is_dir():
                found |= {(int(m[1]), int(f[1])) for f in map(PROBLEM_FILE.match, (x.name for x in d.glob("*.py"))) if f}
    return found


def _references(roots: list[Path], needed: set[tuple[int, int]]) -> dict[tuple[int, int], str]:
    refs: dict[tuple[int, int], str] = {}
    for root in roots:
        for lv in sorted({lv for lv, _ in needed}):
            d = root / f"level{lv}"
            for f in sorted(d.glob("*.py")) if d.is_dir() else []:
                m = PROBLEM_FILE.match(f.name)
                if m and (lv, int(m[1])) in needed and (lv, int(m[1])) not in refs \
                        and f.stat().st_size <= MAX_SOURCE_BYTES:
                    try:
                        refs[(lv, int(m[1]))] = f.read_text("utf-8")
                    except (OSError, UnicodeDecodeError):
                        continue
    return refs


def import_path(paths: list[Path], probe: Callable = probe_outputs) -> ImportBatch:
    """Import KernelBench run folders (and problem folders, for cards); one record per (L, P, S)."""
    run_dirs, roots = _classify(paths)
    plans = [plan_run(_folder(d)) for d in run_dirs]
    needed = {(lv, p) for plan in plans for lv, p, _ in plan.keys} | _problems_in(roots)
    refs = _references(roots, needed)
    cards = build_cards(refs, probe=probe) if refs else {}
    seen: set[str] = set()
    attempts: list[RawAttempt] = []
    quarantined: list[Quarantined] = []
    claims: list[dict[str, Any]] = []
    rejected = [r for plan in plans for r in plan.rejected]
    for plan in plans:
        rows, run_claims = read_run(plan, cards, refs, seen)
        for r in rows:
            (attempts if isinstance(r, RawAttempt) else quarantined).append(r)
        claims += run_claims
    good = sorted((c for c in cards.values() if isinstance(c, TaskCard)), key=lambda c: c.task_id)
    rejected += [quarantine(f"kernelbench L{lv}/P{p}", None, c.code, c.reason, refs[(lv, p)])
                 for (lv, p), c in sorted(cards.items()) if isinstance(c, TaskReject)]
    return ImportBatch(FORMAT, attempts, quarantined, good, claims, rejected, problems_of(claims))
