"""Importers of real corpora: each turns one foreign format into our contracts.

Every importer exposes `import_path(paths) -> ImportBatch`. Every attempt-bearing source record
ends as exactly one `RawAttempt` or one `Quarantined` row (never an exception); tasks the records
bring become `TaskCard`s, and whatever the source *claims* (speedups, statuses, latencies) is kept
as claims, never as grades. Files are streamed: at most one file's records are held at once.

What they share (the batch, decoding, admission, quarantine) is in `base`; this module is the one
list of importers and what the CLI asks of a batch before keeping it.
"""
from __future__ import annotations

from pathlib import Path

from pipelines.core.rawattempt import content_key
from pipelines.importers import cuda_l1, flashinfer, kernelbench
from pipelines.importers.base import FieldProblem, ImportBatch, TaskReject, admit, write_cards

IMPORTERS = {
    "cuda-l1": cuda_l1,
    "kernelbench": kernelbench,
    "flashinfer-bench": flashinfer,
}
"""Importer name -> module exposing `import_path(paths: list[Path]) -> ImportBatch`."""

LAYOUTS = {
    "cuda-l1": ("file", ("CUDA-L1 JSON-lines files, one per GPU (e.g. ../shared/data/cuda-l1/h100.jsonl), "
                         "or folders of them")),
    "kernelbench": ("folder", ("KernelBench run folders (level_L_problem_P_sample_S_kernel.py, eval_results.json) "
                               "together with the KernelBench problems folder (level1/, level2/, ...) that "
                               "defines their tasks")),
    "flashinfer-bench": ("folder", ("FlashInfer-Bench trace-set folders holding definitions/, solutions/ and "
                                    "traces/ (e.g. ../shared/data/flashinfer-trace)")),
}
"""Importer name -> (what a path may be: `file` (or a folder of files) or `folder`, what it holds)."""

TASKS_FROM = {
    "cuda-l1": "each row's ref_code",
    "kernelbench": "the KernelBench problems folder, holding level1/, level2/, ..., given beside the run folders",
    "flashinfer-bench": "the trace set's definitions/ folder",
}
"""Importer name -> where its task definitions come from (said when attempts arrive without cards)."""

UNDECODABLE = frozenset({"bad_encoding", "bad_json"})
"""Reason codes of records that are not text of the format at all (as opposed to a bad field)."""


def repeated_attempts(batch: ImportBatch) -> list[tuple[str, str]]:
    """(origin, origin of the earlier one) for each attempt that repeats an earlier attempt's task and source
    (`pipelines.core.rawattempt.content_key`): the ingest keeps one and quarantines the others as duplicate_attempt."""
    first: dict[tuple[str, str, str], str] = {}
    out = []
    for a in batch.attempts:
        key = content_key(a.source_format, a.task_id, a.source_sha256)
        if key is None:
            continue
        if key in first:
            out.append((a.origin, first[key]))
        else:
            first[key] = a.origin
    return out


def path_problem(fmt: str, paths: list[Path]) -> str | None:
    """Why these paths cannot be an import of `fmt` before reading them (None: go ahead)."""
    kind, layout = LAYOUTS[fmt]
    for p in paths:
        if not p.exists():
            return f"{p} does not exist; {fmt} reads {layout}"
        if kind == "folder" and not p.is_dir():
            return f"{p} is a file, but {fmt} reads folders: {layout}"
    return None


def undecodable_files(batch: ImportBatch) -> dict[str, tuple[int, int]]:
    """Source files most of whose records (at least 5) do not decode: {file: (undecodable, records)}.
    Such a file is the wrong file or the wrong format; quarantining its noise row by row would fill
    the quarantine table (and the release) with it."""
    per: dict[str, list[int]] = {}
    for origin, code in ([(a.origin, None) for a in batch.attempts]
                         + [(q.origin, q.reason_code) for q in batch.quarantined + batch.rejected]):
        counts = per.setdefault(origin.rsplit(":", 1)[0], [0, 0])
        counts[0] += code in UNDECODABLE
        counts[1] += 1
    return {f: (bad, n) for f, (bad, n) in per.items() if n >= 5 and 2 * bad > n}


def refusal(batch: ImportBatch, paths: list[Path]) -> str | None:
    """Why nothing of this batch may be kept (None: keep it): no records at all, or undecodable files."""
    shown = ", ".join(map(str, paths[:3])) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    if not batch.n_records and not batch.cards and not batch.claims and not batch.rejected:
        return f"found no {batch.format} records in {shown}; {batch.format} reads {LAYOUTS[batch.format][1]}"
    refused = undecodable_files(batch)
    if refused:
        path, (bad, total) = next(iter(refused.items()))
        also = f" (and {len(refused) - 1} more such file(s))" if len(refused) > 1 else ""
        return (f"{path} is not a {batch.format} corpus: {bad} of its {total} records are not decodable JSON "
                f"text{also}; nothing was imported (check the format name and the file)")
    return None


__all__ = ["IMPORTERS", "LAYOUTS", "TASKS_FROM", "FieldProblem", "ImportBatch", "TaskReject", "admit", "path_problem",
           "refusal", "repeated_attempts", "undecodable_files", "write_cards"]
