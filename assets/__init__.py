"""Dagster assets of kerneltraj, one module per pipeline stage, each with its asset checks."""
from __future__ import annotations

from assets import accounting, grading, ingest, release, revalidation, splits, trajectories

STAGES = (ingest, grading, trajectories, revalidation, splits, accounting, release)
"""Modules in pipeline order; each exposes its asset(s) and a CHECKS list."""

ASSETS = [ingest.raw_attempts, grading.graded_attempts, trajectories.trajectories,
          revalidation.revalidated_records, splits.family_splits, accounting.accounting, release.release]
CHECKS = [check for stage in STAGES for check in stage.CHECKS]
