"""Workload families and source lineages for every task we grade, on one shared vocabulary.

Three sources feed the catalogue: our own task cards (family and lineage declared on the card),
KernelBench tasks inside the CUDA-L1 corpus (family derived from the ops the reference `Model`
uses, lineage `kernelbench/L{level}`), and FlashInfer-Bench definitions (family from `op_type`,
lineage `flashinfer-bench/<op_type>`). Families of different sources that mean the same
workload map onto one `Family` value, so holding out `attention` holds out our attention cards,
FlashInfer's gqa/mla/dsa kernels and KernelBench's attention blocks together.

A task's *workload key* identifies the computation independent of its sizes: the family plus
the canonical token stream of the reference's compute core. Tasks sharing a key are shape
variants of one workload and are split as one.
The same normaliser (`canonical_tokens`) feeds the near-duplicate check in `pipelines.curation.leakage`.
"""
from __future__ import annotations

import ast
import builtins
import enum
import functools
import hashlib
import json
import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


class Family(str, enum.Enum):
    """Closed vocabulary of workload families shared by every source."""

    ACTIVATION = "activation"
    REDUCTION = "reduction"
    SOFTMAX = "softmax"
    NORM = "norm"
    GEMM = "gemm"
    ATTENTION = "attention"
    CROSS_ENTROPY = "cross_entropy"
    ROTARY = "rotary"
    SCAN = "scan"
    TOPK = "topk"
    CONV = "conv"
    POOLING = "pooling"
    LOSS = "loss"
    """Losses other than cross-entropy (MSE, Huber, KL, hinge, triplet, cosine)."""
    ELEMENTWISE = "elementwise"
    """Plain arithmetic with no named op (KernelBench's matrix-scalar multiply)."""
    ARCHITECTURE = "architecture"
    """Whole networks (KernelBench level 3) without attention."""
    LINEAR_ATTENTION = "linear_attention"
    """Recurrent/linear attention (FlashInfer gdn): a state update, not softmax attention."""
    MOE = "moe"
    SAMPLING = "sampling"


# Names other sources use for the same workload.
FAMILY_ALIASES: dict[str, Family] = {
    "rmsnorm": Family.NORM, "layernorm": Family.NORM, "matmul": Family.GEMM,
    "gqa_paged": Family.ATTENTION, "gqa_ragged": Family.ATTENTION, "mla_paged": Family.ATTENTION,
    "dsa_paged": Family.ATTENTION, "gdn": Family.LINEAR_ATTENTION, "cumsum": Family.SCAN,
}


def canonical_family(name: str) -> Family:
    """Map a family or op-type name onto the shared vocabulary; unknown names raise."""
    key = name.strip().lower()
    if key in FAMILY_ALIASES:
        return FAMILY_ALIASES[key]
    try:
        return Family(key)
    except ValueError:
        raise ValueError(f"unknown family {name!r}: add it to Family or FAMILY_ALIASES "
                         f"(known: {', '.join(f.value for f in Family)})") from None


class Source(str, enum.Enum):
    """Where a task comes from."""

    KERNELTRAJ = "kerneltraj"
    KERNELBENCH = "kernelbench"
    FLASHINFER = "flashinfer-bench"


@dataclass(frozen=True)
class TaskRef:
    """What the split and leakage logic needs to know about one task."""

    task_id: str
    family: Family
    """Workload family on the shared vocabulary."""
    lineage: str
    """Source lineage, e.g. `kerneltraj/softmax`, `kernelbench/L1`, `flashinfer-bench/gemm`."""
    source: Source
    reference: str
    """Reference source; its compute core (sizes stripped) defines the workload key."""

    @property
    def workload_key(self) -> str:
        return workload_key(self.reference, self.family)


# ---- Code normalisation: one token stream for workload keys and near-duplicate detection -----

_TQ = r'[rRbBuUfF]{0,2}(?:"""(?:\\.|[^\\])*?"""' + r"|'''(?:\\.|[^\\])*?''')"
_SQ = r'''[rRbBuUfF]{0,2}(?:"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')'''
_NUM = r"\d+(?:\.\d*)?[eE][+-]?\d+\w*|(?:\d|\.\d)[\w.]*"
# Strings and comments are the only Python spans that are not plain tokens; they are few, so the
# code between them is cut by one C-level findall. Members (`.sum`, `->x`, `::Tensor`) and
# self-attributes (`self.kernel`) are single tokens, so every token can be classified without
# looking at its neighbours: the per-token work is a dict look-up.
_PY_SPANS = re.compile(rf"(?P<tq>{_TQ})|(?P<sq>{_SQ})|(?P<com>#[^\n]*)")
_OPS = r"\*\*|//|<<|>>|[<>=!+\-*/%&|^]=|\S"
_PY_WORDS = re.compile(rf"\b(?:self|cls)\.[A-Za-z_]\w*|\.[A-Za-z_]\w*|[A-Za-z_]\w*|{_NUM}|{_OPS}")
_PY_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_C_COMMENT_OR_STRING = re.compile(rf"(//[^\n]*|/\*.*?\*/)|{_SQ}", re.S)
_C_WORDS = re.compile(rf"{_SQ}|(?:\.|->|::)[A-Za-z_]\w*|[A-Za-z_]\w*|{_NUM}|\+\+|--|&&|\|\||{_OPS}")
# Words that name the language, not a programmer's choice: kept verbatim. Python builtins are
# kept only when the source calls them (`len(x)`), so a variable named `input` is renamed.
_PY_KEEP = set(keyword.kwlist) | {"self", "cls"}
_PY_BUILTINS = set(dir(builtins))
_C_KEEP = {
    "void", "const", "unsigned", "signed", "long", "short", "char", "int", "float", "double", "half",
    "bool", "true", "false", "if", "else", "for", "while", "do", "return", "break", "continue",
    "float2", "float4", "int2", "int4", "half2", "__half", "__half2", "__nv_bfloat16", "size_t",
    "int64_t", "int32_t", "uint32_t", "uint64_t", "auto", "struct", "class", "template", "typename",
    "static", "inline", "extern", "namespace", "using", "switch", "case", "default", "goto", "sizeof",
    "volatile", "register", "nullptr", "__global__", "__device__", "__host__", "__shared__",
    "__constant__", "__restrict__", "__forceinline__", "__launch_bounds__", "__syncthreads",
    "__syncwarp", "warpSize", "include", "define", "pragma", "unroll", "ifdef", "ifndef", "endif"}
# Library roots and CUDA built-in variables: never a programmer's choice.
_API_ROOTS = {"torch", "nn", "F", "functional", "triton", "tl", "math", "np", "numpy", "at", "c10",
              "std", "cub", "cutlass", "cute", "thrust", "nvcuda", "wmma", "einops",
              "threadIdx", "blockIdx", "blockDim", "gridDim"}
_OPENERS, _CLOSERS = "([{", ")]}"
NUM_TOKEN, STR_TOKEN = "<num>", "<str>"


def _chunks(source: str) -> list[tuple[str, list[str]]]:
    """Source cut into ("py" | "c" | "str", tokens) chunks: comments and docstrings dropped, short
    string literals one `str` chunk, literals that hold code (multi-line or long, e.g. CUDA for
    load_inline) tokenised as C with C comments dropped."""
    out: list[tuple[str, list[str]]] = []
    pos = depth = 0
    for m in _PY_SPANS.finditer(source):
        code = source[pos:m.start()]
        if code:
            out.append(("py", _PY_WORDS.findall(code)))
            depth = max(0, depth + sum(map(code.count, _OPENERS)) - sum(map(code.count, _CLOSERS)))
        pos = m.end()
        kind = m.lastgroup
        if kind == "com":
            continue
        first_on_line = not source[source.rfind("\n", 0, m.start()) + 1:m.start()].strip()
        if kind == "tq" and first_on_line and depth == 0:
            continue  # a docstring (or a bare string statement): prose, not code
        body = _string_value(m.group(), 3 if kind == "tq" else 1)
        if "\n" in body or len(body) > 80:
            body = _C_COMMENT_OR_STRING.sub(lambda c: " " if c.group(1) else c.group(), body)
            out.append(("c", _C_WORDS.findall(body)))
        else:
            out.append(("str", []))
    out.append(("py", _PY_WORDS.findall(source[pos:])))
    return out


def _string_value(literal: str, quote: int) -> str:
    """The text a string literal denotes (escapes decoded, so `"a\\nb"` spans two lines like its
    triple-quoted twin); an f-string or odd literal falls back to its raw body."""
    if len(literal) > 80:
        try:
            value = ast.literal_eval(literal)
            if isinstance(value, str):
                return value
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return literal.lstrip("rRbBuUfF")[quote:-quote]


def canonical_tokens(source: str) -> list[str]:
    """Normalised tokens of a source: no comments or docstrings, every number `<num>`, every short
    string `<str>`, and each programmer-chosen identifier (variables, functions, classes, `self.`
    attributes) renamed `v0, v1, ...` by order of first appearance. Keywords, builtins the code
    calls, library roots and members (`torch.matmul`, `x.sum`, `tl.load`) stay, so a renamed,
    reformatted or re-commented copy yields the same stream."""
    chunks = _chunks(source)
    called = {n for kind, toks in chunks if kind == "py" for n in _PY_CALLED.findall(" ".join(toks))} & _PY_BUILTINS
    py_keep = _PY_KEEP | _API_ROOTS | called
    c_keep = _C_KEEP | _API_ROOTS
    names: dict[str, str] = {}
    maps: dict[str, dict[str, str]] = {"py": {}, "c": {}}
    out: list[str] = []
    for kind, toks in chunks:
        if kind == "str":
            out.append(STR_TOKEN)
            continue
        m, keep = maps[kind], (py_keep if kind == "py" else c_keep)
        for t in dict.fromkeys(toks):  # distinct tokens in order of first appearance
            if t in m:
                continue
            c = t[0]
            if c.isalpha() or c == "_":
                if t.startswith(("self.", "cls.")):
                    head, attr = t.split(".", 1)
                    m[t] = f"{head}.{names.setdefault(attr, f'v{len(names)}')}"
                else:
                    m[t] = t if t in keep else names.setdefault(t, f"v{len(names)}")
            elif c.isdigit() or (c == "." and t[1:2].isdigit()):
                m[t] = NUM_TOKEN
            elif c in "\"'" and len(t) > 1:
                m[t] = STR_TOKEN
            else:
                m[t] = t  # operators, punctuation and members (`.sum`, `->x`): API, kept
        out.extend([m[t] for t in toks])
    return out


_SIZE_HELPERS = {"get_inputs", "get_init_inputs"}


@functools.lru_cache(maxsize=65536)  # keys are recomputed by every build and check; sources repeat
def workload_key(reference: str, family: Family | str) -> str:
    """Hash of (family, canonical tokens of the reference's compute core).

    The core is every top-level class and function except KernelBench's `get_inputs` /
    `get_init_inputs`; module-level size constants and imports are dropped, numbers are
    normalised, identifiers renamed by order of appearance. So two tasks that differ only in
    sizes, dtypes of the inputs or variable names share a key.
    """
    try:
        tree = ast.parse(reference)
        core = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and n.name not in _SIZE_HELPERS]
        lines = reference.splitlines()
        text = "\n".join("\n".join(lines[min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1:n.end_lineno])
                         for n in core) if core else reference
    except SyntaxError:
        text = reference
    fam = canonical_family(family.value if isinstance(family, Family) else family).value
    blob = fam + "\x00" + " ".join(canonical_tokens(text))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- KernelBench: family from the ops the reference Model uses ------------------------------

_ATTN_LAYERS = {"MultiheadAttention", "TransformerEncoderLayer", "TransformerEncoder", "Transformer",
                "TransformerDecoderLayer", "TransformerDecoder", "scaled_dot_product_attention"}
_RECURRENT = {"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"}
_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict"}
_LOSS_ARGS = {"target", "targets", "labels", "label", "anchor", "positive", "negative"}
_CE = {"cross_entropy", "CrossEntropyLoss", "nll_loss", "NLLLoss"}
_CONV = ("conv", "Conv")
_GEMM = {"Linear", "linear", "matmul", "mm", "bmm", "einsum", "addmm", "baddbmm", "matmul_"}
_NORM = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm1d",
         "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "layer_norm", "group_norm", "batch_norm",
         "instance_norm", "rms_norm", "normalize", "norm", "rsqrt"}
_SOFTMAX = {"softmax", "log_softmax", "Softmax", "LogSoftmax"}
_SCAN = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"}
_TOPK = {"argmax", "argmin", "topk", "sort", "kthvalue", "argsort"}
_REDUCTION = {"sum", "mean", "max", "min", "prod", "amax", "amin", "logsumexp", "std", "var"}
_ACTIVATION = {"relu", "relu_", "leaky_relu", "sigmoid", "tanh", "gelu", "selu", "elu", "celu",
               "hardsigmoid", "hardtanh", "hardswish", "hard_swish", "softplus", "softsign", "mish",
               "silu", "swish", "relu6", "erf", "abs", "clamp", "exp", "ReLU", "GELU", "Sigmoid",
               "Tanh", "Hardtanh", "Hardswish", "LeakyReLU", "Mish", "SiLU", "ELU", "ReLU6"}


def _called_names(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            out.append(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def _is_transpose(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
        return True
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("transpose", "permute"))


def _has_qk_product(tree: ast.AST) -> bool:
    """A product whose right operand is a transpose (`q @ k.transpose(-2, -1)`)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and _is_transpose(node.right):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("matmul", "bmm") and len(node.args) == 2 and _is_transpose(node.args[1])):
            return True
    return False


def _divides_param_by_keepdim(fn: ast.FunctionDef) -> bool:
    """`x / f(x, keepdim=True)` (directly or through a local): a normalisation."""
    params = {a.arg for a in fn.args.args}
    keepdim_locals = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(
                isinstance(k, ast.keyword) and k.arg == "keepdim" for k in ast.walk(node.value)):
            keepdim_locals |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Mult)) \
                and isinstance(node.left, ast.Name) and node.left.id in params:
            r = node.right
            if (isinstance(r, ast.Name) and r.id in keepdim_locals) or any(
                    isinstance(k, ast.keyword) and k.arg == "keepdim" for k in ast.walk(r)):
                return True
    return False


def _keeps_state(forward: ast.FunctionDef | None) -> bool:
    """forward assigns `self.<attr>`: a recurrent cell carrying hidden state between calls."""
    return forward is not None and any(
        isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
        for n in ast.walk(forward) if isinstance(n, ast.Assign) for t in n.targets)


def classify_kernelbench(ref_code: str, level: int | None = None) -> Family:
    """Family of a KernelBench reference program, by rules on its AST (first match wins).

    1. attention: an attention layer (nn.MultiheadAttention, nn.Transformer*,
       F.scaled_dot_product_attention), a class named *Attention*, or a `q @ k^T` product next
       to a softmax / masked_fill. Checked first at every level so a held-out `attention` family
       also withholds whole models built around it.
    2. architecture: level 3, or (level unknown) a whole network: helper classes, containers
       (Sequential/ModuleList), recurrent layers or state kept on `self` by forward, three or
       more weighted layers, or extra methods on Model. (Level unknown, KernelBench L3's NetVLAD
       reads as gemm: pass the level when it is known.)
    3. loss: forward takes targets/labels/anchor; cross-entropy/NLL -> cross_entropy, else loss.
    4. conv > gemm (Linear, matmul, bmm, einsum, @) > norm (norm layers, x / reduce(keepdim))
       > pooling > softmax > scan (cumsum, cumprod) > topk (argmax, argmin, topk)
       > reduction (sum, mean, max, ...) > activation > elementwise (no named op).
    The order puts the op that dominates cost first: a fused conv+relu+pool chain is conv.
    """
    tree = ast.parse(ref_code)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    model = next((c for c in classes if c.name == "Model"), classes[0] if classes else None)
    scope: ast.AST = model if model is not None else tree
    calls = [n for c in classes for n in _called_names(c)] if classes else _called_names(tree)
    called = set(calls)
    if (called & _ATTN_LAYERS or any("Attention" in c.name for c in classes)
            or (_has_qk_product(tree) and called & {"softmax", "masked_fill", "Softmax"})):
        return Family.ATTENTION
    methods = [f for f in (model.body if model else []) if isinstance(f, ast.FunctionDef)]
    weighted = sum(1 for c in calls if c.startswith("Conv") or c == "Linear" or c in _RECURRENT)  # constructors only
    forward = next((m for m in methods if m.name == "forward"), None)
    if level == 3 or (level is None and (
            len(classes) > 1 or called & (_CONTAINERS | _RECURRENT) or weighted >= 3
            or {m.name for m in methods} - {"__init__", "forward"} or _keeps_state(forward))):
        return Family.ARCHITECTURE
    if forward is not None and {a.arg for a in forward.args.args} & _LOSS_ARGS:
        return Family.CROSS_ENTROPY if called & _CE else Family.LOSS
    if any(c.startswith(_CONV) or c.startswith("conv_transpose") for c in called):
        return Family.CONV
    if called & _GEMM or any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult) for n in ast.walk(scope)):
        return Family.GEMM
    if called & _NORM or (forward is not None and _divides_param_by_keepdim(forward)):
        return Family.NORM
    if any("pool" in c.lower() for c in called):
        return Family.POOLING
    for names, fam in ((_SOFTMAX, Family.SOFTMAX), (_SCAN, Family.SCAN), (_TOPK, Family.TOPK),
                       (_REDUCTION, Family.REDUCTION), (_ACTIVATION, Family.ACTIVATION)):
        if called & names:
            return fam
    return Family.ELEMENTWISE


def classify_flashinfer(definition: dict) -> Family:
    """Family of a FlashInfer-Bench definition from its `op_type` (gqa_*/mla_*/dsa_* -> attention,
    rmsnorm -> norm, gemm -> gemm, gdn -> linear_attention, moe, sampling)."""
    op_type = str(definition.get("op_type", ""))
    if not op_type:
        raise ValueError(f"definition {definition.get('name')!r} has no op_type")
    return canonical_family(op_type)


# ---- Task lists per source ------------------------------------------------------------------

def kernelbench_task_id(level: int, task_id: int) -> str:
    """Our task id for a KernelBench task (importers must use the same)."""
    return f"kernelbench_L{int(level)}_{int(task_id):03d}"


def flashinfer_task_id(name: str) -> str:
    """Our task id for a FlashInfer-Bench definition (importers must use the same)."""
    return f"flashinfer_{name}"


def catalogue_tasks(cards: Iterable | None = None) -> list[TaskRef]:
    """TaskRefs for our task cards (default: the built-in catalogue)."""
    if cards is None:
        from grader.catalogue import load_catalogue
        cards = load_catalogue().values()
    return [TaskRef(c.task_id, canonical_family(c.family), c.lineage, Source.KERNELTRAJ, c.reference)
            for c in cards]


def kernelbench_tasks(jsonl_paths: Iterable[Path]) -> list[TaskRef]:
    """One TaskRef per KernelBench (level, task) found in CUDA-L1 files (one file per GPU)."""
    refs: dict[tuple[int, int], str] = {}
    for path in jsonl_paths:
        for line in Path(path).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            key = (int(row["level_id"]), int(row["task_id"]))
            if refs.setdefault(key, row["ref_code"]) != row["ref_code"]:
                raise ValueError(f"KernelBench task L{key[0]}/{key[1]} has different ref_code in {path}")
    return [TaskRef(kernelbench_task_id(lv, tid), classify_kernelbench(code, lv), f"kernelbench/L{lv}",
                    Source.KERNELBENCH, code) for (lv, tid), code in sorted(refs.items())]


def flashinfer_tasks(definitions_dir: Path) -> list[TaskRef]:
    """One TaskRef per FlashInfer-Bench definition under `definitions/<op_type>/*.json`."""
    out = []
    for path in sorted(Path(definitions_dir).glob("*/*.json")):
        d = json.loads(path.read_text())
        out.append(TaskRef(flashinfer_task_id(d["name"]), classify_flashinfer(d),
                           f"flashinfer-bench/{d['op_type']}", Source.FLASHINFER, d.get("reference", "")))
    return out


def all_tasks(data_dir: Path | None = None, cards: Iterable | None = None) -> list[TaskRef]:
    """Our cards plus, when `data_dir` (the shared data folder) is given, the imported corpora."""
    tasks = catalogue_tasks(cards)
    if data_dir is not None:
        tasks += kernelbench_tasks(sorted(Path(data_dir, "cuda-l1").glob("*.jsonl")))
        tasks += flashinfer_tasks(Path(data_dir, "flashinfer-trace", "definitions"))
    return tasks
