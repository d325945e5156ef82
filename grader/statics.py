"""Static checks on candidate source, before anything runs (threats 10, 19, 22)."""
from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass

from grader.contract import Reason

_AST_LOCK = threading.Lock()
"""CPython 3.11 and 3.12 can fail building an AST while another thread builds one ("SystemError: AST
constructor recursion depth mismatch", cpython#106905): the service's slot threads parse one at a time."""


def parse(source: str) -> ast.Module:
    """ast.parse, one thread at a time (`_AST_LOCK`)."""
    with _AST_LOCK:
        return ast.parse(source)


def literal(text: str):
    """ast.literal_eval, one thread at a time (`_AST_LOCK`)."""
    with _AST_LOCK:
        return ast.literal_eval(text)

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


# Switches of the observation every call runs under (grader/observe.py), by the names a source would write:
# torch's op recording and profiler from Python or from an extension's C++ (its state too: every call is
# observed, so asking is only the first half of a cheat that would run the library when unobserved), CUPTI,
# CPython's eval hooks, and the dispatcher's below-the-record entry points in C++. Read in the whole text (an
# extension's C++ is a string of the Python source); no kernel needs any of them.
_SWITCHES = re.compile(r"\b(?:\w*RecordFunction\w*|_enable_record_function|_clear_callbacks|_prepare_profiler|"
                       r"_enable_profiler\w*|_disable_profiler\w*|_toggle_collection_dynamic|clearCallbacks|"
                       r"clearGlobalCallbacks|clearThreadLocalCallbacks|disableProfiler\w*|cupti\w*|kineto\w*|"
                       r"PyEval_Set\w+|profiler|_profiler\w*|profiler_\w*|_is_profiler_enabled|record_function)\b")
# The dispatcher's own entry points below the record, in an extension's C++ (the Python ones are _DISPATCH_NAMES).
_CPP_DISPATCH = re.compile(r"\b(?:\w*DispatchKeyGuard|ExcludeDispatchKey\w*|AutoDispatchBelow\w*|c10::Dispatcher|"
                           r"callBoxed|redispatch\w*)\b")
# Ways to reach a function's hidden state (its defaults, closure cells, globals): the worker's launch hooks
# and refusals are functions, and their state is the grader's.
# Native calls and raw memory: ctypes reaches past every rule a Python-level worker can keep (a function's
# address, a write anywhere). No kernel needs it; an extension is built through torch's loader instead.
_NATIVE = re.compile(r"\b(?:ctypes|_ctypes|cffi)\b")
_INTROSPECTION = re.compile(r"\b(?:__closure__|cell_contents|__kwdefaults__|__defaults__|__globals__|f_globals|"
                            r"f_locals|f_builtins|gi_frame|tb_frame|_cdata|_ZN\w*|at::native)\b")


# Host-side computation: the answer computed by a host library the observation cannot see (numpy is no
# dispatcher op), copied in by an allowed op or a token kernel of the candidate's own. On a GPU the trip through
# the host shows in the trace (grader/session.py); these are the words that bring it in.
_HOST_COMPUTE = re.compile(r"\b(?:numpy|from_numpy|tolist|scipy)\b")
# Code generation by the library: a compiled region records no op of what it computes (torch.compile of the
# task's own op), so the observation could not judge it. No candidate language is "whatever inductor makes".
_CODEGEN = re.compile(r"\btorch\s*\.\s*compile\b|\b_dynamo\b|\b_inductor\b|\bdynamo\b|\binductor\b")


@dataclass(frozen=True)
class Finding:
    """One static reason to floor a candidate."""

    code: Reason
    detail: str


def host_compute(source: str, lists: bool = True) -> list[Finding]:
    """A host library brought in to compute (numpy, scipy; with `lists`, `tolist` too): refused for own-kernel
    candidates, and, without `lists`, for PyTorch candidates of a card that names the ops they may use (a
    constant such as `np.log2(8)` in a KernelBench module is fine where the card lists no ops; a row printed
    with `tolist` while debugging is fine anywhere a PyTorch candidate computes)."""
    return _first(_HOST_COMPUTE, source, Reason.LIBRARY_COMPUTE,
                  "brings in {}: a host library computing the answer is neither the candidate's own kernel nor an op "
                  "the task allows", skip=() if lists else ("tolist",))


def _first(pattern: re.Pattern, source: str, code: Reason, why: str, skip: tuple[str, ...] = ()) -> list[Finding]:
    """A finding for the first match of `pattern` in the whole text (not in `skip`), naming its line; `why` has
    one `{}` for the matched word."""
    for m in pattern.finditer(source):
        if m.group(0) not in skip:
            return [Finding(code, f"line {source.count(chr(10), 0, m.start()) + 1}: " + why.format(m.group(0)[:60]))]
    return []


def static_findings(source: str, language: str = "") -> list[Finding]:
    """Findings in source order; a source that does not parse is left to the worker (compile_error)."""
    found: list[Finding] = []
    found += _first(_CODEGEN, source, Reason.LIBRARY_COMPUTE, "uses {}: code torch generates records none of the ops "
                                                              "it computes, so no rule of the task could judge it")
    if language in ("triton", "cuda"):
        found += host_compute(source)
    found += _first(_SWITCHES, source, Reason.INTERPRETER, "names {}, a switch of the observation every call runs "
                                                           "under; a kernel never needs it")
    found += _first(_CPP_DISPATCH, source, Reason.DISPATCHER_ESCAPE, "reaches past torch's dispatcher ({}); kernels "
                                                                     "are called, never registered or redispatched")
    found += _first(_NATIVE, source, Reason.INTERPRETER, "uses {}: native calls and raw memory reach past every rule "
                                                         "of the worker (build an extension through torch's loader "
                                                         "instead)")
    found += _first(_INTROSPECTION, source, Reason.INTERPRETER, "reads {}, the hidden state of functions (the "
                                                                "grader's are among them)")
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return found
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


def declared_triton_kernels(source: str) -> list[str]:
    """Names of the functions a candidate's source decorates with a Triton JIT (`@triton.jit`, `@jit`, or under
    `@triton.autotune`/`@triton.heuristics`): the kernels the device runs carry them. Empty: none found."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in node.decorator_list):
            names.add(node.name)
    return sorted(names)


def ran_own_kernel(declared: list[str], kernels: list[str], prefix: bool = False) -> bool:
    """Whether any kernel the profiler saw carries one of the declared names (as a whole identifier: a
    template's `void ns::name<float>(...)` or an `extern "C"` kernel's `name(...)` alike; with `prefix`, a
    name the compiler extended, as older Triton releases did with a signature suffix)."""
    if not declared:
        return True
    own = _own_pattern(declared, prefix)
    return any(own(k) for k in kernels)


def _own_pattern(declared: list[str], prefix: bool):
    names = "|".join(map(re.escape, declared))
    if prefix:  # the whole name, or with a Triton signature suffix (`_0d1d2de`)
        return re.compile(r"(?:" + names + r")(?:_\d[0-9a-z]*)?").fullmatch
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + names + r")(?![A-Za-z0-9_])").search


# Kernels that move memory and never compute: the worker's own L2 flush and output copy, and what the
# structural ops an own-kernel candidate may call (`taskcard.STRUCTURAL_OPS`) launch.
_STRUCTURAL_KERNEL = re.compile(r"Memset|Memcpy|memset|memcpy|FillFunctor|fill_kernel|direct_copy_kernel|"
                                r"copy_kernel|CatArrayBatchedCopy|copy_device_to_device|arange")


def library_kernels(declared: list[str], kernels: list[str], prefix: bool = False) -> list[str]:
    """Kernels of an own-kernel candidate's call that are neither its own (`declared`) nor memory movement:
    the library computed there, however it was reached (a GEMM its C++ called, a replayed CUDA graph)."""
    own = _own_pattern(declared, prefix) if declared else (lambda k: False)
    return [k for k in kernels if not own(k) and not _STRUCTURAL_KERNEL.search(k)]
