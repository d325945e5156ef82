"""`kerneltraj import` (an external corpus kept for the next release, with the problems a user can fix now) and
`kerneltraj imports` (the list, and removing one)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from pipelines.cli.args import fail, settings_from_args


def cmd_import(args: argparse.Namespace) -> int:
    """Run an importer and keep its output under <state>/imports/<import id>/ for the next release."""
    from grader.catalogue import load_catalogue
    from pipelines.core import import_registry as reg
    from pipelines.importers import IMPORTERS, path_problem, refusal

    if args.format not in IMPORTERS:
        return fail("import", f"unknown format {args.format!r}; known: {', '.join(sorted(IMPORTERS))}")
    settings = settings_from_args(args)
    paths = [Path(p).resolve() for p in args.paths]
    problem = path_problem(args.format, paths)
    if problem:
        return fail("import", problem)
    batch = IMPORTERS[args.format].import_path(paths)
    problem = refusal(batch, paths)
    if problem:
        return fail("import", problem)
    key = reg.import_id(args.format, paths)
    rows = reg.batch_rows(batch)
    conflicts = reg.card_conflicts(settings.state_dir, rows["tasks"], key)
    if conflicts:
        (task, other), more = conflicts[0], len(conflicts) - 1
        return fail("import", f"task {task} of this import differs from the card import {other} holds"
                     f"{f' (and {more} more task(s))' if more else ''}; nothing was imported (remove that "
                     f"import with `kerneltraj imports --remove {other}` if this one should replace it)")
    known = set(load_catalogue()) | {c["task_id"] for c in rows["tasks"]} | reg.known_task_ids(settings.state_dir,
                                                                                                  key)
    overlap = reg.attempt_overlap(settings.state_dir, {a.attempt_id for a in batch.attempts}, key)
    repeats = reg.content_overlap(settings.state_dir, rows["attempts"], key)
    for line in _import_warnings(args.format, batch, known, overlap, repeats) + _field_warnings(
            batch, reg.imports_dir(settings.state_dir) / key / "problems.jsonl"):
        print(f"kerneltraj import: warning: {line}", file=sys.stderr)
    entry, replaced = reg.record(settings.state_dir, args.format, paths, rows)
    print(json.dumps({"import": entry.import_id, "format": args.format, "replaced": replaced,
                      "attempts": len(batch.attempts), "quarantined": len(batch.quarantined),
                      "tasks": len(batch.cards), "claims": len(batch.claims), "rejected": len(batch.rejected),
                      "field_problems": len(batch.problems),
                      "written_to": str(Path(entry.files["attempts"]).parent)}, indent=1))
    print(f"the next `kerneltraj release` ingests these attempts and task cards"
          f"{' (this replaced the earlier import of the same files)' if replaced else ''}; "
          f"`kerneltraj imports` lists every import", file=sys.stderr)
    return 0


def _import_warnings(fmt: str, batch, known: set[str], overlap: dict[str, int], repeats: dict[str, int],
                     ) -> list[str]:
    """Problems a user can fix now, rather than find as quarantined rows after the next release."""
    from pipelines.importers import TASKS_FROM, repeated_attempts

    out = []
    orphans = sorted({a.task_id for a in batch.attempts} - known)
    if orphans:
        n = sum(a.task_id in orphans for a in batch.attempts)
        out.append(f"{n} of {len(batch.attempts)} attempts name {len(orphans)} task(s) with no task card "
                   f"(e.g. {orphans[0]}); the next release will quarantine them as unknown_task. To grade them, "
                   f"import them again with what defines their tasks: {TASKS_FROM[fmt]}")
    for other, n in sorted(overlap.items()):
        out.append(f"{n} attempt id(s) of this import are also in import {other} (the same records twice?); "
                   f"the next release quarantines the second copy as duplicate_id. Drop one with "
                   f"`kerneltraj imports --remove {other}`")
    same = repeated_attempts(batch)
    if same:
        (origin, first), n = same[0], len(same)
        out.append(f"{n} attempt(s) of this import repeat the task and source code of an earlier one (e.g. {origin} "
                   f"repeats {first}); the next release grades each once, quarantines the repeats as "
                   f"duplicate_attempt and audits every claim against that one grade")
    for other, n in sorted(repeats.items()):
        out.append(f"{n} attempt(s) of this import repeat the task and source code of one in import {other}; the "
                   f"next release grades each once and quarantines the repeats as duplicate_attempt")
    return out


def _field_warnings(batch, where: Path, shown: int = 3) -> list[str]:
    """Fields of kept records that could not be read as their type (kept as null), named record by record."""
    problems = batch.problems
    if not problems:
        return []
    listed = "; ".join(f"{p.origin}: {p.field} {p.problem}" for p in problems[:shown])
    more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
    return [f"{len(problems)} field(s) could not be read and are kept as null: {listed}{more}; all of them are "
            f"listed in {where}"]


def cmd_imports(args: argparse.Namespace) -> int:
    """List the imports the next release reads, or remove one."""
    from pipelines.core import import_registry as reg

    settings = settings_from_args(args)
    found = reg.entries(settings.state_dir)
    if args.remove:
        if args.remove not in {e.import_id for e in found}:
            return fail("imports", f"no import {args.remove!r}; known: "
                         f"{', '.join(e.import_id for e in found) or 'none (run `kerneltraj import`)'}")
        gone = reg.remove(settings.state_dir, args.remove)
        print(f"removed import {gone.import_id} ({', '.join(gone.sources) or gone.format}); the next release "
              f"leaves out its attempts", file=sys.stderr)
        return 0
    if args.json:
        print(json.dumps([dataclasses.asdict(e) for e in found], indent=1))
        return 0
    for e in found:
        counts = ", ".join(f"{k} {v}" for k, v in e.counts.items()) or "counts not recorded"
        print(f"{e.import_id}\t{e.imported_at}\t{counts}\t{' '.join(e.sources)}")
    print(f"{len(found)} import(s)" + ("; remove one with `kerneltraj imports --remove ID`" if found else
                                        "; add one with `kerneltraj import FORMAT PATH`"), file=sys.stderr)
    return 0
