"""Static checks on candidate source, before anything runs (threats 10, 19, 22)."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from grader.contract import Reason

_REFERENCE_NAMES = {"Model", "Reference", "ReferenceModel"}

# Ways past the dispatcher and the profiler that observes it: registering kernels for aten ops (the
# worker's own flush or copy would run them), calling an op below the profiler's record, or wrapping
# torch's own calls in a mode. No kernel needs them; the names are refused wherever they appear,
# as attributes, imports or the strings a getattr would use.
_HOOK_METHODS = {"__torch_function__", "__torch_dispatch__"}
_TORCH_ONLY = {"library", "_ops", "overrides"}  # refused as torch.<name> (other objects may use the word)
_DISPATCH_NAMES = {"library", "redispatch", "_ops", "_python_dispatch", "overrides", "__torch_dispatch__",
                   "__torch_function__", "TorchDispatchMode", "TorchFunctionMode", "_DisableTorchDispatch",
                   "DisableTorchFunction", "DisableTorchFunctionSubclass", "_ExcludeDispatchKeyGuard",
                   "_IncludeDispatchKeyGuard", "_AutoDispatchBelowAutograd", "DispatchKeySet", "DispatchKey"}


@dataclass(frozen=True)
class Finding:
    """One static reason to floor a candidate."""

    code: Reason
    detail: str


def static_findings(source: str) -> list[Finding]:
    """Findings in source order; a source that does not parse is left to the worker (compile_error)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[Finding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                if name in _REFERENCE_NAMES:
                    found.append(Finding(Reason.INHERITANCE_BYPASS,
                                         f"line {node.lineno}: class {node.name} inherits the reference {name}"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for mod in mods:
                if mod.split(".")[0] in ("grader", "pipelines", "assets"):
                    found.append(Finding(Reason.SANDBOX_VIOLATION,
                                         f"line {node.lineno}: imports the grader's own package {mod!r}"))
            names = [p for m in mods for p in m.split(".")]
            if isinstance(node, ast.ImportFrom):
                names += [a.name for a in node.names]
            if mods and mods[0].split(".")[0] == "torch":
                found += _dispatch(node, names)
        elif isinstance(node, ast.Attribute):
            on_torch = isinstance(node.value, ast.Name) and node.value.id == "torch"
            if node.attr not in _TORCH_ONLY or on_torch:
                found += _dispatch(node, [node.attr], torch_ops=_is_torch_ops_aten(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in _HOOK_METHODS:
            found += _dispatch(node, [node.name])
        elif isinstance(node, ast.Name) and node.id in _HOOK_METHODS:
            found += _dispatch(node, [node.id])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _DISPATCH_NAMES:
            found += _dispatch(node, [node.value])
    return found


def _dispatch(node: ast.AST, names: list[str], torch_ops: bool = False) -> list[Finding]:
    hit = [n for n in names if n in _DISPATCH_NAMES or n.startswith("_dispatch")]
    if torch_ops:
        hit.append("torch.ops.aten")
    if not hit:
        return []
    return [Finding(Reason.DISPATCHER_ESCAPE, f"line {getattr(node, 'lineno', '?')}: reaches past torch's dispatcher "
                                              f"({hit[0]}); kernels are called, never registered or redispatched")]


def _is_torch_ops_aten(node: ast.Attribute) -> bool:
    """torch.ops.aten / torch.ops.prims: library ops called below the names a card lists."""
    inner = node.value
    return (node.attr in ("aten", "prims") and isinstance(inner, ast.Attribute) and inner.attr == "ops"
            and isinstance(inner.value, ast.Name) and inner.value.id == "torch")


_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_GLOBAL = re.compile(r"__global__\s+[^(;{}]*?\b([A-Za-z_]\w*)\s*\(")


def declared_kernels(source: str) -> list[str]:
    """Names of the CUDA kernels (`__global__` functions) a candidate's source declares, in its inline C++/CUDA
    text (load_inline, CuPy RawKernel) or anywhere else: empty when it declares none."""
    text = _LAUNCH_BOUNDS.sub(" ", source)
    return sorted({m.group(1) for m in _GLOBAL.finditer(text)})


def ran_own_kernel(declared: list[str], kernels: list[str]) -> bool:
    """Whether any kernel the profiler saw carries one of the declared names (as a whole identifier: a
    template's `void ns::name<float>(...)` or an `extern "C"` kernel's `name(...)` alike)."""
    if not declared:
        return True
    pattern = re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(map(re.escape, declared)) + r")(?![A-Za-z0-9_])")
    return any(pattern.search(k) for k in kernels)
