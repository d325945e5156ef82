"""Dagster assets of kerneltraj, one module per pipeline stage, each with its asset checks."""
from __future__ import annotations

from assets import (accounting, claims, contention, grading, ingest, learning, publish, release, revalidation, splits,
                    trajectories)

STAGES = (ingest, grading, trajectories, revalidation, contention, claims, splits, learning, accounting, release,
          publish)
"""Modules in pipeline order; each exposes its asset(s) and a CHECKS list."""

ASSETS = [ingest.raw_attempts, grading.graded_attempts, trajectories.trajectories,
          revalidation.revalidated_records, contention.contention_replay, contention.revalidation_report,
          claims.claim_audit, splits.family_splits, learning.learning_comparison,
          accounting.accounting, release.release]
PUBLISH_ASSETS = [publish.published_release]
"""Assets that leave the machine: only in `publish_job`, never in `release_job`."""
CHECKS = [check for stage in STAGES for check in stage.CHECKS]
