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

from pathlib import Path
from typing import Any, Callable

from grader.taskcard import TaskCard
from pipelines.core.rawattempt import Quarantined, RawAttempt
from pipelines.curation.families import kernelbench_task_id
from pipelines.importers.base import ImportBatch, TaskReject, problems_of, quarantine
from pipelines.importers.kernelbench.cards import build_cards, hidden_batches, task_card
from pipelines.importers.kernelbench.probe import ProbeResult, probe_outputs
from pipelines.importers.kernelbench.runs import (FORMAT, RunFolder, RunPlan, classify_paths, run_folder, problems_in,
                                                  references, language_of, parse_eval_results, plan_run, read_run)
from pipelines.importers.kernelbench.shapes import MAX_DIM, ModuleShape, analyse_module, init_inputs_of

__all__ = ["FORMAT", "MAX_DIM", "ModuleShape", "ProbeResult", "RunFolder", "RunPlan", "analyse_module", "build_cards",
           "hidden_batches", "import_path", "init_inputs_of", "kernelbench_task_id", "language_of",
           "parse_eval_results", "plan_run", "probe_outputs", "read_run", "task_card"]


def import_path(paths: list[Path], probe: Callable = probe_outputs) -> ImportBatch:
    """Import KernelBench run folders (and problem folders, for cards); one record per (L, P, S)."""
    run_dirs, roots = classify_paths(paths)
    plans = [plan_run(run_folder(d)) for d in run_dirs]
    needed = {(lv, p) for plan in plans for lv, p, _ in plan.keys} | problems_in(roots)
    refs = references(roots, needed)
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
