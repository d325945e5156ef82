"""The assets this run's records already answer (primary grades, claims, the contention replay and its report),
materialised with the records as the release's grader; run from the repository root after the recipe's import
(docs/label_survival.md). The recheck is not complete, so the whole release cannot run yet; this is how
status_partial.json was made. Dagster orders only what the selection holds: run it twice on an empty warehouse
(the replay checks its pairs against the primary grades the first run stores)."""
import os
import sys
sys.path.insert(0, '.')
os.environ["KERNELTRAJ_STATE_DIR"] = "./.kerneltraj/survival"
os.environ["KERNELTRAJ_DEVICE_RECORDS"] = "./docs/measurements/2026-12-02-h200-run33/records"
os.environ["KERNELTRAJ_INPUTS"] = os.pathsep.join(["./demo/attempts.jsonl", "./demo/malformed.jsonl",
    "./.kerneltraj/survival/imports/cuda-l1/h100-504c4823/attempts.jsonl"])
os.environ["DAGSTER_HOME"] = "./.kerneltraj/survival/dagster_home"
import dagster as dg
from pipelines.core.settings import Settings
from pipelines.cli.instance import ensure_dagster_home
from pipelines.defs.definitions import RELEASE_JOB, build_defs
s = Settings.from_env()
ensure_dagster_home(s)
job = build_defs(s).resolve_job_def(RELEASE_JOB)
sel = [dg.AssetKey(k) for k in ("raw_attempts", "graded_attempts", "claim_audit", "contention_replay",
                                "revalidation_report")]
r = job.execute_in_process(instance=dg.DagsterInstance.get(), asset_selection=sel, raise_on_error=False)
print("success", r.success)
for ev in r.all_events:
    if ev.event_type_value in ("STEP_FAILURE",):
        print(ev.step_key, ev.event_specific_data.error.message[:2000])
