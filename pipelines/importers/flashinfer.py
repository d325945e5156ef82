"""FlashInfer-Bench traces: Definitions -> task cards, Solutions -> attempts, Traces -> claims.

Field mapping follows flashinfer-bench's own schema (flashinfer_bench/data/{definition,solution,
trace,workload}.py, release 0.1.2): a Definition has `axes` (const with `value`, or var),
`inputs`/`outputs` (symbolic `shape`, `dtype`; shape None = scalar), `reference` (Python `run`),
`constraints`; a Solution has `name`, `definition`, `author`, `spec{language, target_hardware,
entry_point "file::symbol", dependencies, destination_passing_style (default True), binding}`,
`sources[{path, content}]`; a Trace has `definition`, `workload{axes, inputs, uuid}`,
`solution`, `evaluation{status, environment{hardware, libs}, timestamp, log, correctness,
performance}`.

A definition becomes a card only when our card format can generate its inputs faithfully: no
cross-axis/value constraints (index arrays, ragged layouts), no scalar or optional inputs, one
floating-point output. Var axes get public sizes from the traces' workloads (or a seeded draw
when no trace exists) and hidden sizes drawn deterministically (seeded by the definition name)
from the var axes' range; const axes are fixed. Solutions on other definitions are quarantined
with the reason, as are solutions whose files are hostile (absolute or `..` paths).
"""
from __future__ import annotations

import hashlib
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

from grader.adapters import flashinfer_candidate_source
from grader.taskcard import DTYPE_BYTES, TaskCard
from pipelines.core.rawattempt import MAX_LINE_BYTES, Quarantined, RawAttempt, id_part
from pipelines.importers.base import (ImportBatch, TaskReject, admit, decoded_or_quarantined, iter_lines, problems_of,
                                      quarantine, sha256_hex, type_problem)
from pipelines.importers.kernelbench.shapes import MAX_DIM

try:  # another module owns families and ids; fall back to the same scheme when it is absent
    from pipelines.curation.families import classify_flashinfer, flashinfer_task_id
except ImportError:  # pragma: no cover
    classify_flashinfer = None

    def flashinfer_task_id(name: str) -> str:
        return f"flashinfer_{name}"

FORMAT = "flashinfer-bench"
AGENT = "flashinfer-bench"
MAX_FILE_BYTES = 4 << 20
ELEM = DTYPE_BYTES
FLOAT_OUT = ("float32", "float16", "bfloat16")
INTEGER_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
"""Integer outputs (indices, samples, masks): they need a task-specific checker, not tolerances."""
STATUSES = ("PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE", "RUNTIME_ERROR",
            "COMPILE_ERROR", "TIMEOUT")
DEFAULT_VAR_RANGE = (1, 8192)
"""Range of a var axis (FlashInfer-Bench declares none), widened to every value a workload used."""
CPU_VAR_MAX = 64
CPU_ELEMENT_BUDGET = 1 << 22
"""A `cpu` profile exists only if every input and the output fit in this many elements at CPU_VAR_MAX."""
MAX_PUBLIC, N_HIDDEN = 6, 2
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,150}$")
_ROUND = re.compile(r"_r(\d{1,4})_c(\d{1,4})(?:_([A-Za-z0-9_.\-]{1,40}))?$")
_SRC_PATH = re.compile(r"^[A-Za-z0-9_.\-/]{1,200}$")


@dataclass
class Definition:
    """The parts of a FlashInfer-Bench Definition the importer uses."""

    name: str
    op_type: str
    const_axes: dict[str, int]
    var_axes: list[str]
    inputs: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    reference: str
    description: str
    constraints: list[str]
    origin: str
    workloads: list[dict[str, int]] = field(default_factory=list)
    """Var-axis values of the traces' workloads (public sizes)."""


def parse_definition(raw: bytes, where: str) -> Definition | Quarantined:
    """One definition file -> Definition, or a rejection naming the field."""
    d = decoded_or_quarantined(raw, where, MAX_FILE_BYTES)
    if isinstance(d, Quarantined):
        return d
    name, axes, ins, outs, ref = (d.get(k) for k in ("name", "axes", "inputs", "outputs", "reference"))
    if not (isinstance(name, str) and _NAME.match(name) and ".." not in name):
        return quarantine(where, None, "bad_id", "definition name must be a plain identifier-like string", raw)
    if not all(isinstance(x, dict) and x for x in (axes, ins, outs)) or not isinstance(ref, str) or not ref.strip():
        return quarantine(where, name, "missing_field", "axes, inputs, outputs and reference are required", raw)
    const, var = {}, []
    for a, spec in axes.items():
        kind = spec.get("type") if isinstance(spec, dict) else None
        v = spec.get("value") if isinstance(spec, dict) else None
        if kind == "const" and isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_DIM:
            const[a] = v
        elif kind == "var":
            var.append(a)
        else:
            return quarantine(where, name, "bad_type", f"axis {str(a)[:40]!r} is neither const(value) nor var", raw)
    for kind, tensors in (("input", ins), ("output", outs)):
        for t, spec in tensors.items():
            shape = spec.get("shape", 0) if isinstance(spec, dict) else 0
            if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str) or not (
                    shape is None or isinstance(shape, list) and all(isinstance(s, str) and s in axes for s in shape)):
                return quarantine(where, name, "bad_type", f"{kind} {str(t)[:40]!r} needs a dtype and a shape "
                                  "over declared axes", raw)
    cons = d.get("constraints") or []
    op_type = d.get("op_type")
    return Definition(name, op_type if isinstance(op_type, str) else "", const, var, ins, outs, ref,
                      str(d.get("description") or "")[:500], [str(c) for c in cons] if isinstance(cons, list)
                      else [str(cons)], where)


def card_problem(d: Definition) -> TaskReject | None:
    """Why a definition cannot become a card with faithful inputs (None when it can)."""
    if d.constraints:
        return TaskReject("constrained_inputs", f"constraints {d.constraints[:2]} tie inputs to each other "
                          "(index arrays, ragged layouts); random inputs per tensor would be invalid")
    if len(d.outputs) != 1:
        return TaskReject("multi_output", f"{len(d.outputs)} outputs; a card grades exactly one tensor")
    (out,) = d.outputs.values()
    if out["dtype"] in INTEGER_DTYPES:
        return TaskReject("integer_output", f"output dtype {out['dtype']} (indices or samples) needs a "
                          "task-specific checker, not tolerances")
    if out["dtype"] not in FLOAT_OUT:
        return TaskReject("unsupported_dtype", f"output dtype {str(out['dtype'])[:40]!r} is not one the grader "
                          f"compares ({', '.join(FLOAT_OUT)})")
    for n, spec in d.inputs.items():
        if spec.get("shape") is None:
            return TaskReject("scalar_input", f"input {n} is a scalar; its legal values are not declared")
        if spec.get("optional"):
            return TaskReject("optional_input", f"input {n} is optional")
        if spec["dtype"] not in ELEM:
            return TaskReject("unsupported_dtype", f"input {n} has dtype {spec['dtype']}")
    if not d.var_axes:
        return TaskReject("no_var_axis", "no var axis: nothing to draw hidden sizes from")
    return None


_REF_EPILOGUE = '''

# ---- kerneltraj adapter: FlashInfer-Bench reference -> run(*inputs) ----
import torch as _kt_torch

_kt_definition_run = run


def run(*inputs):
    """The definition's reference, positional in the definition's input order, one tensor out."""
    with _kt_torch.no_grad():
        out = _kt_definition_run(*inputs)
    return out[0] if isinstance(out, (tuple, list)) and len(out) == 1 else out
'''


def _draw(rng: random.Random, lo: int, hi: int, avoid: set[int], n: int) -> list[int]:
    """n distinct log-uniform integers in [lo, hi] not in `avoid` (fewer if the range is exhausted)."""
    out: list[int] = []
    for _ in range(64 * n):
        if len(out) == n:
            break
        v = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
        if lo <= v <= hi and v not in avoid and v not in out:
            out.append(v)
    return sorted(out)


def _sizes(d: Definition) -> tuple[dict, dict]:
    """Public and hidden sizes per profile; deterministic in the definition name and its workloads."""
    rng = random.Random(int(hashlib.sha256(d.name.encode()).hexdigest()[:16], 16))
    seen = sorted({tuple(w[a] for a in d.var_axes) for w in d.workloads})
    if len(seen) > MAX_PUBLIC:  # spread over the observed range
        seen = [seen[round(i * (len(seen) - 1) / (MAX_PUBLIC - 1))] for i in range(MAX_PUBLIC)]
    # The var axis' range: the default range widened to every value a workload used.
    ranges = {a: (min([DEFAULT_VAR_RANGE[0]] + [w[a] for w in d.workloads]),
                  max([DEFAULT_VAR_RANGE[1]] + [w[a] for w in d.workloads])) for a in d.var_axes}
    public = [dict(zip(d.var_axes, t)) for t in seen]
    if not public:
        public = [{a: v for a, v in zip(d.var_axes, vs)} for vs in zip(
            *[_draw(rng, *ranges[a], set(), 2) for a in d.var_axes])]
    hidden = [dict(zip(d.var_axes, vs)) for vs in zip(
        *[_draw(rng, max(1, ranges[a][0]), ranges[a][1], {p[a] for p in public}, N_HIDDEN)
          for a in d.var_axes])]
    full = lambda s: {**d.const_axes, **s}  # noqa: E731
    pub, hid = {"gpu": tuple(map(full, public))}, {"gpu": tuple(map(full, hidden))}
    cpu_pub = sorted({tuple(min(p[a], CPU_VAR_MAX) for a in d.var_axes) for p in public})
    cpu_hid = [dict(zip(d.var_axes, vs)) for vs in zip(*[_draw(rng, 1, CPU_VAR_MAX, {c[i] for c in cpu_pub}, N_HIDDEN)
                                                           for i, a in enumerate(d.var_axes)])]
    biggest = full({a: CPU_VAR_MAX for a in d.var_axes})
    tensors = list(d.inputs.values()) + list(d.outputs.values())
    if all(math.prod(biggest[a] for a in t["shape"]) <= CPU_ELEMENT_BUDGET for t in tensors):
        pub["cpu"] = tuple(full(dict(zip(d.var_axes, c))) for c in cpu_pub)
        hid["cpu"] = tuple(map(full, cpu_hid))
    return pub, hid


def make_card(d: Definition) -> TaskCard | TaskReject:
    """The definition's card, or why it has none; never raises."""
    problem = card_problem(d)
    if problem is not None:
        return problem
    try:
        return definition_card(d)
    except Exception as e:  # noqa: BLE001 - e.g. an op_type outside the closed family vocabulary
        return TaskReject("bad_definition", f"{type(e).__name__}: {str(e)[:160]}")


def definition_card(d: Definition) -> TaskCard:
    """The card of a definition that passed `card_problem`."""
    from grader.taskcard import InputSpec

    (out,) = d.outputs.values()
    pub, hid = _sizes(d)
    moved = [f"{'*'.join(t['shape']) or '1'}*{ELEM[t['dtype']]}" for t in d.inputs.values()]
    family = classify_flashinfer({"name": d.name, "op_type": d.op_type}).value if classify_flashinfer else d.op_type
    reference = d.reference.rstrip() + "\n" + _REF_EPILOGUE
    return TaskCard(
        task_id=flashinfer_task_id(d.name), family=family, lineage=f"flashinfer-bench/{d.op_type}",
        description=d.description or d.name,
        inputs=tuple(InputSpec(n, tuple(s["shape"]), s["dtype"]) for n, s in d.inputs.items()),
        output_shape=tuple(out["shape"]), output_dtype=out["dtype"],
        reference=reference,
        expert=reference,  # the definition's PyTorch reference at native precision (no flashinfer on workers)
        expert_kind="library",
        public_sizes=pub, hidden_sizes=hid,
        bytes_moved=" + ".join(moved + [f"{'*'.join(out['shape']) or '1'}*E"]),
    )


def parse_trace(raw: bytes, where: str, run: str) -> tuple[dict[str, Any], dict[str, int]] | Quarantined:
    """One trace line -> (claim, workload var-axis values), or a rejection."""
    if len(raw) > MAX_LINE_BYTES:
        return quarantine(where, None, "oversized_row", f"trace line is {len(raw)} bytes", raw)
    t = decoded_or_quarantined(raw, where, MAX_FILE_BYTES)
    if isinstance(t, Quarantined):
        return t
    definition, wl, sol, ev = t.get("definition"), t.get("workload"), t.get("solution"), t.get("evaluation")
    if not (isinstance(definition, str) and _NAME.match(definition)) or not isinstance(wl, dict):
        return quarantine(where, None, "missing_field", "a trace needs a definition name and a workload", raw)
    axes = wl.get("axes")
    if not isinstance(axes, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 < v < MAX_DIM
                                             for v in axes.values()):
        return quarantine(where, None, "bad_type", "workload.axes must map axis names to positive integers", raw)
    if sol is not None and not (isinstance(sol, str) and _NAME.match(sol) and ".." not in sol):
        return quarantine(where, None, "bad_id", "solution must be a plain name or null", raw)
    if ev is not None and not (isinstance(ev, dict) and ev.get("status") in STATUSES):
        return quarantine(where, None, "bad_type", f"evaluation.status must be one of {STATUSES}", raw)
    ev = ev or {}
    unreadable: dict[str, str] = {}  # fields of the wrong type: kept as null, and said (never silently null)

    def part(name: str) -> dict[str, Any]:
        v = ev.get(name)
        if v is not None and not isinstance(v, dict):
            unreadable[f"evaluation.{name}"] = type_problem(v, "an object")
        return v if isinstance(v, dict) else {}

    def num(group: str, d: dict[str, Any], name: str) -> float | None:
        v = d.get(name)
        if v is None:
            return None
        if type(v) in (int, float) and math.isfinite(v):
            return float(v)
        unreadable[f"evaluation.{group}.{name}"] = type_problem(v, "a finite number")
        return None

    perf, corr, env = part("performance"), part("correctness"), part("environment")
    log = ev.get("log") if isinstance(ev.get("log"), str) else ""
    claim = {
        "source_format": FORMAT, "origin": where, "run": run, "solution": sol,
        "attempt_id": f"flashinfer:{run}:{sol}" if sol else None, "attempt_admitted": False,
        "task_id": flashinfer_task_id(definition), "workload_uuid": str(wl.get("uuid", ""))[:64],
        "workload_axes": {str(k)[:64]: v for k, v in axes.items()}, "status": ev.get("status"),
        "hardware": str(env.get("hardware", ""))[:200] or None,
        "libs": {str(k)[:64]: str(v)[:64] for k, v in env.get("libs", {}).items()}
        if isinstance(env.get("libs"), dict) else {},
        "timestamp": str(ev.get("timestamp", ""))[:64] or None,
        "max_relative_error": num("correctness", corr, "max_relative_error"),
        "max_absolute_error": num("correctness", corr, "max_absolute_error"),
        "latency_ms": num("performance", perf, "latency_ms"),
        "reference_latency_ms": num("performance", perf, "reference_latency_ms"),
        "claimed_speedup": num("performance", perf, "speedup_factor"),
        "log_sha256": sha256_hex(log) if log else None, "log_bytes": len(log.encode("utf-8", "replace")),
    }
    if unreadable:
        claim["unreadable_fields"] = unreadable
    return claim, dict(axes)


def _clean(text: str) -> bool:
    """Text that every downstream writer (UTF-8 parquet, DuckDB) accepts."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


def _source_files(sources: Any) -> dict[str, str] | str:
    """path -> content, or the reason the list is refused (hostile paths are refused, not cleaned)."""
    if not isinstance(sources, list) or not sources:
        return "sources must be a non-empty list"
    out: dict[str, str] = {}
    for s in sources:
        path, content = (s.get("path"), s.get("content")) if isinstance(s, dict) else (None, None)
        if not isinstance(path, str) or not isinstance(content, str) or not content:
            return "each source needs a path and non-empty content"
        if not _clean(content):
            return f"source {path[:60]!r} holds NUL or unpaired surrogates"
        pp = PurePosixPath(path)
        if not _SRC_PATH.match(path) or pp.is_absolute() or ".." in pp.parts or path.startswith("/"):
            return f"source path {path[:60]!r} is absolute, escapes its folder or has odd characters"
        if path in out:
            return f"duplicate source path {path[:60]!r}"
        out[path] = content
    return out


def parse_solution(raw: bytes, where: str, run: str, defs: dict[str, Definition],
                   cards: dict[str, TaskCard | TaskReject], claimed: dict[str, float | None],
                   seen: set[str]) -> RawAttempt | Quarantined:
    """One solution file -> an attempt (its sources wrapped into a `run(*inputs)` module) or a rejection."""
    s = decoded_or_quarantined(raw, where, MAX_FILE_BYTES)
    if isinstance(s, Quarantined):
        return s
    name, definition, author, spec = (s.get(k) for k in ("name", "definition", "author", "spec"))
    if not (isinstance(name, str) and _NAME.match(name) and ".." not in name):
        return quarantine(where, None, "bad_id", "solution name must be a plain identifier-like string", raw)
    aid = f"flashinfer:{run}:{name}"
    if not isinstance(definition, str) or not isinstance(author, str) or not author.strip() \
            or not isinstance(spec, dict):
        return quarantine(where, aid, "missing_field", "definition, author and spec are required", raw)
    if not _clean(author):
        return quarantine(where, aid, "bad_encoding", "author holds NUL or unpaired surrogates", raw)
    files = _source_files(s.get("sources"))
    if isinstance(files, str):
        return quarantine(where, aid, "bad_path", files, raw)
    entry = spec.get("entry_point")
    if not isinstance(entry, str) or entry.count("::") != 1 or entry.split("::")[0] not in files \
            or not entry.split("::")[1].isidentifier():
        return quarantine(where, aid, "bad_entry_point", f"entry_point {str(entry)[:60]!r} must be "
                          "'<file among sources>::<identifier>'", raw)
    lang, binding = spec.get("language"), spec.get("binding")
    if lang not in ("cuda", "cpp") or binding not in ("torch", None) or binding is None:
        return quarantine(where, aid, "unsupported_language", f"language {str(lang)[:20]!r} with binding "
                          f"{str(binding)[:20]!r}: only C++/CUDA through the torch binding is supported", raw)
    d, card = defs.get(definition), cards.get(definition)
    if d is None:
        return quarantine(where, aid, "unknown_task", f"definition {definition[:80]!r} is not among the definitions",
                          raw)
    if isinstance(card, TaskReject) or card is None:
        why = f"{card.code}: {card.reason}" if card else "no card"
        return quarantine(where, aid, "unsupported_task", f"definition {definition} cannot be graded ({why})", raw)
    dps = spec.get("destination_passing_style", True)
    (out,) = d.outputs.values()
    m = _ROUND.search(name)
    source = flashinfer_candidate_source(files, entry.split("::")[1], dps is not False,
                                         [i["shape"] for i in d.inputs.values()], out["shape"], out["dtype"],
                                         d.const_axes)
    obj = {
        "attempt_id": aid, "task_id": card.task_id, "agent": AGENT, "model": author[:200],
        "trajectory_id": f"flashinfer:{run}:{id_part(author)}:{definition}", "turn": int(m[1]) if m else 1,
        "language": "cuda", "source": source, "entry_point": "run", "source_format": FORMAT,
        "claimed_speedup": claimed.get(aid),
        "extra": {"original_sha256": sha256_hex(raw), "run": run, "solution_name": name, "definition": definition,
                  "round": int(m[1]) if m else None, "candidate": int(m[2]) if m else None,
                  "name_suffix": m[3] if m else None, "destination_passing_style": dps is not False,
                  "spec": {k: v for k, v in spec.items() if isinstance(v, (str, bool, list)) and len(str(v)) < 400},
                  "sources": {p: sha256_hex(c) for p, c in files.items()},
                  "description": str(s.get("description") or "")[:500]},
    }
    return admit(obj, where, raw, seen)


def _roots(paths: list[Path]) -> Iterator[Path]:
    for p in map(Path, paths):
        if (p / "definitions").is_dir() or (p / "solutions").is_dir():
            yield p


def _json_files(folder: Path, pattern: str) -> Iterator[tuple[str, Path]]:
    """(run name, file) for `folder/<run>/<pattern>` and `folder/<op>/<pattern>`, sorted."""
    if folder.is_dir():
        for f in sorted(folder.glob(f"*/{pattern}")):
            yield f.parent.name, f


def _read(f: Path) -> bytes:
    with open(f, "rb") as fh:
        return fh.read(MAX_FILE_BYTES + 1)


def import_path(paths: list[Path]) -> ImportBatch:
    """Import FlashInfer-Bench dataset roots (folders holding definitions/, solutions/, traces/)."""
    defs: dict[str, Definition] = {}
    rejected: list[Quarantined] = []
    claims: list[dict[str, Any]] = []
    roots = list(_roots(paths))
    for root in roots:
        for _, f in _json_files(root / "definitions", "*.json"):
            raw = _read(f)
            d = parse_definition(raw, str(f))
            if isinstance(d, Quarantined):
                rejected.append(d)
            elif d.name in defs:
                rejected.append(quarantine(str(f), d.name, "duplicate_definition",
                                           f"definition {d.name} already read from {defs[d.name].origin}", raw))
            else:
                defs[d.name] = d
    for root in roots:
        for run, f in _json_files(root / "traces", "*.jsonl"):
            for lineno, raw in iter_lines(f):
                if not raw.strip():
                    continue
                got = parse_trace(raw, f"{f}:{lineno}", id_part(run))
                if isinstance(got, Quarantined):
                    rejected.append(got)
                    continue
                claim, axes = got
                claims.append(claim)
                d = defs.get(claim["task_id"].removeprefix(flashinfer_task_id("")))
                if d is not None and set(axes) == set(d.var_axes):
                    d.workloads.append(axes)
    cards: dict[str, TaskCard | TaskReject] = {}
    for name, d in defs.items():
        cards[name] = make_card(d)
        if isinstance(cards[name], TaskReject):
            rejected.append(quarantine(d.origin, name, cards[name].code, cards[name].reason, d.reference))
    claimed = _claimed_speedups(claims)
    seen: set[str] = set()
    attempts: list[RawAttempt] = []
    quarantined: list[Quarantined] = []
    for root in roots:
        for run, f in _json_files(root / "solutions", "*.json"):
            rec = parse_solution(_read(f), str(f), id_part(run), defs, cards, claimed, seen)
            (attempts if isinstance(rec, RawAttempt) else quarantined).append(rec)
    admitted = {a.attempt_id for a in attempts}
    for c in claims:
        c["attempt_admitted"] = c["attempt_id"] in admitted
    good = sorted((c for c in cards.values() if isinstance(c, TaskCard)), key=lambda c: c.task_id)
    return ImportBatch(FORMAT, attempts, quarantined, good, claims, rejected, problems_of(claims))


def _claimed_speedups(claims: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per attempt: geometric-mean claimed speedup when every traced workload PASSED, else None."""
    by: dict[str, list[dict[str, Any]]] = {}
    for c in claims:
        if c["attempt_id"]:
            by.setdefault(c["attempt_id"], []).append(c)
    out: dict[str, float | None] = {}
    for aid, cs in by.items():
        vals = [c["claimed_speedup"] for c in cs]
        ok = all(c["status"] == "PASSED" for c in cs) and all(v is not None and v > 0 for v in vals)
        out[aid] = math.exp(sum(map(math.log, vals)) / len(vals)) if ok else None
    return out
