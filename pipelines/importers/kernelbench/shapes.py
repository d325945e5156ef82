"""A KernelBench module read without running it: the inputs `get_inputs()` draws (as seeded draws plus steps of
`grader.inputs`, or, where they are not that, made by the task's own `get_inputs`), its one size, the
constructor arguments `get_init_inputs()` gives, and whether a batch axis may be rebound for hidden sizes."""
from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from typing import Any

from grader.taskcard import DTYPE_BYTES, InputSpec
from pipelines.importers.base import TaskReject
from pipelines.importers.kernelbench.folding import Unfoldable, fold, module_env

MAX_DIM = 1 << 31
DTYPES = {"float32": "float32", "float": "float32", "float16": "float16", "half": "float16",
          "bfloat16": "bfloat16", "int64": "int64", "long": "int64", "int32": "int32", "int": "int32",
          "bool": "bool"}
"""torch dtype attribute -> our dtype name."""
ELEM = DTYPE_BYTES
IN_ELEM = {**ELEM, "bool": 1}
"""Bytes per element of an input (an output is never bool)."""
_NOOP_METHODS = {"contiguous", "cuda", "float"}


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
            and node.attr in DTYPES:
        return DTYPES[node.attr]
    raise TaskReject("unsupported_dtype", f"input dtype {ast.unparse(node)[:40]!r} is not one of {sorted(ELEM)}")


def _dims(args: list[ast.expr], env: dict[str, Any], size: dict[str, int],
          shapes: dict[str, tuple] | None = None) -> tuple[str | int, ...]:
    if len(args) == 1 and isinstance(args[0], ast.Attribute) and args[0].attr == "shape" \
            and isinstance(args[0].value, ast.Name) and args[0].value.id in (shapes or {}):
        return shapes[args[0].value.id]  # torch.randint(0, 2, x.shape): the axes of an earlier input
    if len(args) == 1 and not isinstance(args[0], ast.Starred):
        try:
            v = fold(args[0], env)
        except Unfoldable:
            v = None
        if isinstance(v, (tuple, list)):  # torch.randn((a, b)) or torch.randn(shape)
            args = [ast.Constant(int(d)) if isinstance(d, int) else ast.Constant(None) for d in v]
    dims: list[str | int] = []
    for a in args:
        try:
            v = fold(a.value if isinstance(a, ast.Starred) else a, env)
        except Unfoldable as e:
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
            lo, hi = ([0] + [fold(b, env) for b in bounds])[-2:]
        except Unfoldable as e:
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
        v = fold(node, env)
    except Unfoldable:
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
        return fold(node.args[0], env) in ((), [])
    except Unfoldable:
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
        return ModuleShape((), {}, _init_inputs(tree, module_env(tree)), _doc(model), None,
                           "inputs made by the task's own get_inputs", own_inputs=r.reason)


def _drawn(tree: ast.Module, model: ast.ClassDef, fn: ast.FunctionDef) -> ModuleShape:
    """The module's inputs as seeded draws plus steps (`grader.inputs`); TaskReject where they are not that."""
    env, size = module_env(tree), {}
    local: dict[str, Any] = {}
    specs: list[InputSpec] | None = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            tname = stmt.targets[0].id
            try:
                env[tname] = fold(stmt.value, env)
            except Unfoldable:
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
                    specs.append(scalar_spec(e.id if isinstance(e, ast.Name) else f"in{i}", fold(e, env), i))
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


def scalar_spec(name: str, value: Any, i: int) -> InputSpec:
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
        v = fold(body[0].value, env)
    except Unfoldable:
        return None
    return list(v) if isinstance(v, (list, tuple)) else None


def _doc(cls: ast.ClassDef) -> str:
    doc = (ast.get_docstring(cls) or "").strip().splitlines()
    return doc[0][:200] if doc else ""


def init_inputs_of(code: str) -> list[Any] | None:
    """The reference's constructor arguments when they fold statically (for the candidate adapter)."""
    try:
        return analyse_module(code).init_inputs
    except TaskReject:
        return None
