"""The grading resource of a release whose grades were made on another machine: a device run's records
(`pipelines.grading.device_run`) answer each request instead of a local grader.

Every grading step asks it the same requests as it would ask a live grader, and gets the recorded outcome of
the same attempt, seed and source (a different source or task is refused, never matched); the contention
replay takes the recorded settings (`replay`). A request the device run never graded is an error that
names it: a release is graded on one device or not at all, never half on this CPU.
"""
from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from grader.contract import GradeRequest
from pipelines.grading.backend import GradingBackend
from pipelines.grading.client import GradeOutcome, GradingIncomplete
from pipelines.grading.device_run import (GRADES_FILE, SETTINGS_FILE, outcome_of, read_jsonl, records_folder,
                                          source_sha256)
from pipelines.grading.replay import (ReplayGrade, ReplayPlan, Setting, SettingRun, replay_attempt_id,
                                      sample_pairs)


class RecordsMismatch(ValueError):
    """A record does not belong to the request it would answer."""


class RecordedGrader(GradingBackend):
    """Answers grade requests from a device run's records folder (grades.jsonl, settings.jsonl)."""

    records: str
    """The records folder a device run wrote (`bench/gpu_label_survival.py --out`)."""

    @functools.cached_property
    def _grades(self) -> dict[tuple[str, int], dict[str, Any]]:
        folder = records_folder(self.records)
        return {(r["result"]["attempt_id"], int(r["seed"])): r for r in read_jsonl(folder / GRADES_FILE)
                if r["pass"] != "replay"}

    def grade(self, requests: Sequence[GradeRequest]) -> Iterator[GradeOutcome]:
        """The recorded outcome of every request, or GradingIncomplete naming those the device run lacks."""
        missing = [r.attempt_id for r in requests if (r.attempt_id, r.seed) not in self._grades]
        if missing:
            raise GradingIncomplete(
                f"{len(missing)} of {len(requests)} requests were not graded in the device run at {self.records} "
                f"(first: {missing[:5]}); resume that run (bench/gpu_label_survival.py --resume-from "
                f"{self.records}), or write a new plan with `kerneltraj device-plan` for these inputs and grade it")
        outcomes = []
        for r in requests:
            rec = self._grades[(r.attempt_id, r.seed)]
            outcome = outcome_of(rec)
            if outcome.result.task_id != r.task_id or rec["source_sha256"] != source_sha256(r.source):
                raise RecordsMismatch(
                    f"{r.attempt_id}: the device run graded task {outcome.result.task_id} with source sha256 "
                    f"{rec['source_sha256'][:12]}, this release asks for task {r.task_id} with "
                    f"{source_sha256(r.source)[:12]}; the attempt changed since the plan was written")
            outcomes.append(outcome)
        return iter(outcomes)

    def recorded_wall_s(self, grading_pass: str) -> float | None:
        """The device's wall seconds for this pass: over each call's segment of it, its last grade's time."""
        ends: dict[str, float] = {}
        for r in read_jsonl(Path(self.records) / GRADES_FILE):
            if r["pass"] == grading_pass and r.get("segment"):
                ends[r["segment"]] = max(ends.get(r["segment"], 0.0), float(r["segment_s"]))
        return sum(ends.values()) if ends else None

    def replay(self, candidates: Sequence[dict[str, Any]]) -> tuple[ReplayPlan | None, list[dict], str,
                                                                     list[SettingRun]]:
        """The recorded contention settings, in the order they ran, with the plan, pairs and sample rule they
        ran under. The pairs must be the sample this warehouse draws from its own correct primary grades
        (`candidates`) under that plan: a replay of other attempts is refused."""
        lines = read_jsonl(Path(self.records) / SETTINGS_FILE)
        if not lines:
            return None, [], "the device run recorded no contention setting", []
        plans = {json.dumps(ln["plan"], sort_keys=True) for ln in lines}
        if len(plans) > 1:
            raise RecordsMismatch(f"{self.records}: settings recorded under {len(plans)} different replay plans")
        d = lines[0]["plan"]
        plan = ReplayPlan(**{**d, "settings": tuple(Setting(s) for s in d["settings"])})
        pairs, rule = sample_pairs(candidates, plan)
        replayed = {replay_attempt_id(g["result"]["attempt_id"]) for ln in lines for g in ln["grades"]}
        if not replayed <= {p["attempt_id"] for p in pairs}:
            raise RecordsMismatch(
                f"{self.records}: the device run replayed {sorted(replayed - {p['attempt_id'] for p in pairs})[:5]}, "
                f"which are not in this warehouse's sample of correct primary grades ({rule})")
        runs = [SettingRun(_row(ln["row"]), [ReplayGrade(g["grader_index"], g["repeat"], outcome_of(g))
                                             for g in ln["grades"]]) for ln in lines]
        return plan, pairs, rule, runs


def _row(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    if isinstance(out.get("started_at"), str):
        out["started_at"] = dt.datetime.fromisoformat(out["started_at"])
    return out
