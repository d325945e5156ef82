"""KernelBench run folders as attempts: `level_{L}_problem_{P}_sample_{S}_kernel.py` per generated kernel,
`generation_config.yaml` (model, backend) and `eval_results.json` (problem id -> result; older scripts: one dict
per problem, newer: a list of per-sample dicts with `sample_id, compiled, correctness, metadata, runtime,
runtime_stats`), whose results are kept as claims. References are not in a run folder: a KernelBench problems
folder (`level1/1_Name.py`, ...) given alongside defines the tasks."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from grader.contract import MAX_SOURCE_BYTES
from grader.taskcard import TaskCard
from pipelines.core.rawattempt import Quarantined, RawAttempt, id_part
from pipelines.curation.families import kernelbench_task_id
from pipelines.importers.base import (TaskReject, Undecodable, admit, decode_object, quarantine, sha256_hex,
                                      type_problem)
from pipelines.importers.kernelbench.shapes import init_inputs_of

FORMAT = "kernelbench"


def language_of(code: str) -> str:
    """`cuda` for modules compiling C++/CUDA through torch's extension loader, `triton`, else `pytorch`."""
    if "load_inline" in code or "cpp_extension" in code:
        return "cuda"
    return "triton" if "triton.jit" in code else "pytorch"


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


def run_folder(d: Path) -> RunFolder:
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
        doc = decode_object(raw, MAX_EVAL_BYTES, "eval_results.json")
    except Undecodable as e:  # whatever is wrong with it, the file as a whole is not evaluation results
        return {}, [quarantine(where, None, "bad_json", f"eval_results.json unreadable: {e.reason}", raw)]
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


def _is_run(d: Path) -> bool:
    """A run folder: KernelBench's eval results, or kernel files named as its scripts name them. A
    `levelN` folder of a problems root is never one, though some task files end in `_kernel.py`
    (`50_conv_standard_2D__square_input__square_kernel.py`): those are tasks, never attempts."""
    if (d / "eval_results.json").is_file() or any(KERNEL_FILE.match(f.name) for f in d.glob("*_kernel.py")):
        return True
    return not re.fullmatch(r"level\d+", d.name) and any(d.glob("*_kernel.py"))


def _is_problems(d: Path) -> bool:
    return any(sub.is_dir() and re.fullmatch(r"level\d+", sub.name) for sub in d.iterdir())


def classify_paths(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
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


def problems_in(roots: list[Path]) -> set[tuple[int, int]]:
    """(level, problem) of every task file under the problems roots: a root given to the importer is read
    whole, so its tasks become cards whether or not a run folder has attempts at them."""
    found = set()
    for root in roots:
        for d in sorted(root.iterdir()):
            m = re.fullmatch(r"level(\d+)", d.name)
            if m and d.is_dir():
                names = (x.name for x in d.glob("*.py"))
                found |= {(int(m[1]), int(f[1])) for f in map(PROBLEM_FILE.match, names) if f}
    return found


def references(roots: list[Path], needed: set[tuple[int, int]]) -> dict[tuple[int, int], str]:
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
