"""What `kerneltraj import` keeps for the next release: one import per (format, source files).

`<state>/imports/registry.json` maps an import id such as `cuda-l1/h100-1a2b3c4d` (the format, the
first source's name and a hash of every source path) to the files that import wrote under
`<state>/imports/<import id>/`. Importing the same files again replaces that one import; importing
other files of the same corpus adds another, so `a100.jsonl` after `h100.jsonl` keeps both.

Task cards are shared between imports (two CUDA-L1 files bring the same KernelBench tasks), and the
catalogue refuses a task id defined twice, so the cards of every import are merged into one
`<state>/imports/tasks.jsonl`, rewritten whenever an import is added or removed. A card that
differs from another import's card of the same task id is refused at import time.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from pipelines.core.rawattempt import content_key, id_part

REGISTRY = "registry.json"
MERGED_TASKS = "tasks.jsonl"
KINDS = ("attempts", "quarantine", "tasks", "claims", "rejected", "problems")
"""Files of one import, each `<kind>.jsonl` in its folder (`problems`: fields kept as null, see FieldProblem)."""


@dataclass(frozen=True)
class ImportEntry:
    """One import as the registry holds it."""

    import_id: str
    """`<format>/<first source's name>-<hash of the source paths>` (a bare format for imports made
    before imports were keyed by file)."""
    format: str
    """Importer name: `cuda-l1`, `kernelbench` or `flashinfer-bench`."""
    sources: tuple[str, ...]
    """Absolute paths the import read."""
    imported_at: str
    """UTC time of the import, ISO 8601."""
    counts: dict[str, int]
    """Rows written per kind (attempts, quarantined, tasks, claims, rejected); empty for old imports."""
    files: dict[str, str]
    """Kind -> path of the file written."""


def imports_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "imports"


def registry_path(state_dir: Path) -> Path:
    return imports_dir(state_dir) / REGISTRY


def import_id(fmt: str, sources: Sequence[str | Path]) -> str:
    """Stable id of an import of exactly these sources (order does not matter)."""
    paths = sorted(str(Path(p).resolve()) for p in sources)
    digest = hashlib.sha256("\n".join(paths).encode("utf-8", "surrogatepass")).hexdigest()[:8]
    first = Path(paths[0])
    name = id_part(first.name.removesuffix(".jsonl") or "root", 40)
    more = f"+{len(paths) - 1}" if len(paths) > 1 else ""
    return f"{fmt}/{name}{more}-{digest}"


def _read(state_dir: Path) -> dict[str, dict[str, Any]]:
    path = registry_path(state_dir)
    return json.loads(path.read_text()) if path.is_file() else {}


def _write(state_dir: Path, registry: dict[str, dict[str, Any]]) -> None:
    path = registry_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(registry, indent=1, sort_keys=True))
    tmp.replace(path)  # a reader sees the old registry or the new one, never half


def _entry(key: str, e: dict[str, Any]) -> ImportEntry:
    return ImportEntry(key, e.get("format") or key.split("/", 1)[0], tuple(e.get("sources", ())),
                       e.get("imported_at", ""), dict(e.get("counts", {})),
                       {k: e[k] for k in KINDS if e.get(k)})


def entries(state_dir: Path) -> list[ImportEntry]:
    """Every import, sorted by id (the order the next release reads them in)."""
    return [_entry(k, e) for k, e in sorted(_read(state_dir).items())]


def files_by_kind(state_dir: Path) -> dict[str, tuple[str, ...]]:
    """Files the next release reads: attempts and quarantine per import, and the merged task cards."""
    found = entries(state_dir)
    out = {kind: tuple(e.files[kind] for e in found if kind in e.files) for kind in ("attempts", "quarantine")}
    merged = imports_dir(state_dir) / MERGED_TASKS
    # Before imports were keyed by file the registry listed each import's own cards; read those then.
    out["tasks"] = (str(merged),) if merged.is_file() else tuple(e.files["tasks"] for e in found
                                                                 if "tasks" in e.files)
    return out


def _jsonl(path: str | Path) -> Iterable[dict[str, Any]]:
    p = Path(path)
    if p.is_file():
        for line in p.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def _normal(card: dict[str, Any]) -> str:
    return json.dumps(card, sort_keys=True, default=list)


def card_conflicts(state_dir: Path, cards: Iterable[dict[str, Any]], except_id: str) -> list[tuple[str, str]]:
    """(task id, import id) for every card that another import holds with a different definition."""
    mine = {c["task_id"]: _normal(c) for c in cards}
    out = []
    for e in entries(state_dir):
        if e.import_id == except_id or "tasks" not in e.files:
            continue
        for c in _jsonl(e.files["tasks"]):
            if c.get("task_id") in mine and mine[c["task_id"]] != _normal(c):
                out.append((c["task_id"], e.import_id))
    return out


def known_task_ids(state_dir: Path, except_id: str) -> set[str]:
    """Task ids whose cards the other imports bring."""
    return {c["task_id"] for e in entries(state_dir) if e.import_id != except_id and "tasks" in e.files
            for c in _jsonl(e.files["tasks"])}


def attempt_overlap(state_dir: Path, attempt_ids: set[str], except_id: str) -> dict[str, int]:
    """Import id -> how many of these attempt ids it already holds."""
    out = {}
    for e in entries(state_dir):
        if e.import_id != except_id and "attempts" in e.files:
            n = sum(1 for a in _jsonl(e.files["attempts"]) if a.get("attempt_id") in attempt_ids)
            if n:
                out[e.import_id] = n
    return out


def content_of(attempt: dict[str, Any]) -> tuple[str, str, str] | None:
    """`pipelines.core.rawattempt.content_key` of an imported attempt row: what makes two imported attempts one."""
    source = attempt.get("source")
    if not isinstance(source, str):
        return None
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    return content_key(attempt.get("source_format"), str(attempt.get("task_id")), digest)


def content_overlap(state_dir: Path, attempts: Sequence[dict[str, Any]], except_id: str) -> dict[str, int]:
    """Import id -> how many of these attempts repeat the content (`content_of`) of one it holds under another id
    (one under the same id is `attempt_overlap`'s)."""
    mine = {c: a.get("attempt_id") for a in attempts if (c := content_of(a)) is not None}
    ids = set(mine.values())
    out = {}
    for e in entries(state_dir):
        if e.import_id != except_id and "attempts" in e.files:
            theirs = {content_of(a) for a in _jsonl(e.files["attempts"]) if a.get("attempt_id") not in ids}
            n = len(theirs & set(mine))
            if n:
                out[e.import_id] = n
    return out


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True, default=list) + "\n" for r in rows))
    tmp.replace(path)  # a reader sees the old file or the new one, never half


def record(state_dir: Path, fmt: str, sources: Sequence[str | Path], rows: dict[str, list[dict[str, Any]]],
           ) -> tuple[ImportEntry, bool]:
    """Write one import's rows (kind -> dicts) and register it; True when it replaced the same import."""
    key = import_id(fmt, sources)
    folder = imports_dir(state_dir) / key
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for kind in KINDS:
        files[kind] = str(folder / f"{kind}.jsonl")
        _write_jsonl(Path(files[kind]), rows.get(kind, []))
    registry = _read(state_dir)
    replaced = key in registry
    registry[key] = {**files, "format": fmt, "sources": sorted(str(Path(p).resolve()) for p in sources),
                     "counts": {k: len(rows.get(k, [])) for k in KINDS},
                     "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write(state_dir, registry)
    _merge_tasks(state_dir)
    return _entry(key, registry[key]), replaced


def remove(state_dir: Path, key: str) -> ImportEntry:
    """Drop one import: its files and its registry entry; raises KeyError for an unknown id."""
    registry = _read(state_dir)
    gone = _entry(key, registry.pop(key))
    for path in gone.files.values():
        Path(path).unlink(missing_ok=True)
    folder = imports_dir(state_dir) / key
    if folder.is_dir() and not any(p.is_dir() for p in folder.iterdir()):
        shutil.rmtree(folder)  # a pre-keying import shares its format folder with keyed ones: keep those
    _write(state_dir, registry)
    _merge_tasks(state_dir)
    return gone


def _merge_tasks(state_dir: Path) -> None:
    """One card per task id over every import (identical cards collapse; conflicts were refused)."""
    merged: dict[str, dict[str, Any]] = {}
    for e in entries(state_dir):
        for card in _jsonl(e.files["tasks"]) if "tasks" in e.files else ():
            merged.setdefault(card["task_id"], card)
    _write_jsonl(imports_dir(state_dir) / MERGED_TASKS, [merged[k] for k in sorted(merged)])


def batch_rows(batch: Any) -> dict[str, list[dict[str, Any]]]:
    """An ImportBatch as the rows `record` writes."""
    attempts = []
    for a in batch.attempts:
        d = dataclasses.asdict(a)
        # Ingest re-homes origins to this file's lines; the corpus's own file:line stays in extra.
        d["extra"] = {**d["extra"], "import_origin": d.pop("origin")}
        attempts.append(d)
    return {"attempts": attempts, "quarantine": [dataclasses.asdict(q) for q in batch.quarantined],
            "tasks": [dataclasses.asdict(c) for c in batch.cards], "claims": list(batch.claims),
            "rejected": [dataclasses.asdict(q) for q in batch.rejected],
            "problems": [dataclasses.asdict(p) for p in batch.problems]}
