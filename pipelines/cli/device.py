"""`kerneltraj device-plan`: every grade request a release of these inputs will make, written to a folder that
travels to a GPU machine without Dagster (`bench/gpu_label_survival.py` grades it there; `kerneltraj release
--device-records` loads what comes back). `pipelines.grading.device_run` says how the pieces fit."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.cli.args import fail, settings_from_args


def cmd_device_plan(args: argparse.Namespace) -> int:
    from grader.catalogue import load_catalogue
    from pipelines.core.rawattempt import RawAttempt, parse_lines
    from pipelines.curation.checkpoint_comparison import GRADE_SEED, checkpoint_attempts
    from pipelines.grading.client import GraderSpec
    from pipelines.grading.device_run import PlannedGrade, write_plan
    from pipelines.grading.passes import PASS_PRIMARY, PASS_REVALIDATION, pass_seed

    settings = settings_from_args(args)
    missing = [p for p in (*settings.inputs, *settings.task_files, *settings.checkpoints) if not Path(p).is_file()]
    if missing:
        return fail("device-plan", f"{missing[0]} is not a file; give the attempt files of the release with --inputs")
    cards = load_catalogue(extra=list(settings.task_files) or None)
    attempts: list[RawAttempt] = []
    refused = 0
    seen: set[str] = set()
    turns: dict = {}
    contents: dict = {}
    for path in settings.inputs:  # as the ingest admits them; a refused row is never graded, so never planned
        with open(path, "rb") as f:
            for row in parse_lines(f, path, known_tasks=cards, seen_ids=seen, held_turns=turns,
                                   held_contents=contents):
                if isinstance(row, RawAttempt):
                    attempts.append(row)
                else:
                    refused += 1
    checkpoints = checkpoint_attempts(settings.checkpoints, load_catalogue())  # as learning_comparison reads them

    def planned(a: RawAttempt, grading_pass: str, seed: int) -> PlannedGrade:
        return PlannedGrade(grading_pass, a.attempt_id, a.task_id, a.source, a.language, a.entry_point or "run", seed)

    grades = [planned(a, p, pass_seed(a.attempt_id, p)) for p in (PASS_PRIMARY, PASS_REVALIDATION) for a in attempts]
    grades += [planned(a, "checkpoint", GRADE_SEED) for a in checkpoints]
    spec = GraderSpec(mode=settings.grader_mode, timeout_s=settings.timeout_s, profile=settings.profile,
                      retries=settings.retries)
    plan = write_plan(Path(args.out), grades, [Path(p) for p in settings.task_files], spec,
                      {"inputs": list(settings.inputs), "checkpoints": list(settings.checkpoints),
                       "rows_refused_at_ingest": refused})
    print(f"device plan for {len(attempts)} attempts ({refused} rows refused, as the ingest will) and "
          f"{len(checkpoints)} checkpoint attempts: {plan['counts']} -> {args.out}\n"
          f"next, on the GPU machine: python3 bench/gpu_label_survival.py --plan {args.out} --state .survival_state "
          f"--out OUT; then here: kerneltraj release --device-records OUT (with the same --inputs)", file=sys.stderr)
    return 0
