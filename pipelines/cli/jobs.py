"""The commands that run a Dagster job: `kerneltraj release` (the release job in this process, with its stages and
a grading bar as they happen) and `kerneltraj publish` (the publish job, or its exact commit written with
--dry-run)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from pipelines.cli.args import fail, settings_from_args
from pipelines.cli.instance import RUN_TAG_HOST, RUN_TAG_PID, ensure_dagster_home, quiet_dagster, recover_stale_runs


class ReleaseProgress:
    """Dagster event listener: stage names as they start and finish, a tqdm bar while grading."""

    def __init__(self, stages: Sequence[str], out=None):
        self.stages = list(stages)
        self.out = out or sys.stderr  # the stream of the moment, not the one at import: a caller may redirect it
        self.bar = None
        self.started: dict[str, float] = {}
        self.failed_checks: list[str] = []

    def _say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.out)
        else:
            print(text, file=self.out, flush=True)

    def __call__(self, entry: Any) -> None:
        from pipelines.grading.passes import parse_progress

        ev = entry.dagster_event
        if ev is None:
            prog = parse_progress(entry.user_message)
            if prog:
                self._progress(*prog)
            return
        name, step = ev.event_type_value, ev.step_key
        if name == "STEP_START" and step in self.stages:
            self.started[step] = time.monotonic()
            self._say(f"[{len(self.started)}/{len(self.stages)}] {step} ...")
        elif name == "STEP_SUCCESS" and step in self.stages:
            self._close_bar()
            self._say(f"      {step} done in {time.monotonic() - self.started.get(step, time.monotonic()):.1f}s")
        elif name == "STEP_FAILURE":
            self._close_bar()
            err = ev.step_failure_data.error if ev.step_failure_data else None
            while err is not None and err.cause is not None:  # Dagster's wrapper says where; its cause says why
                err = err.cause
            self._say(f"      FAILED {step}: {err.message.strip() if err else ''}")
        elif name == "ASSET_CHECK_EVALUATION":
            data = ev.event_specific_data
            label = f"{data.asset_key.to_user_string()}:{data.check_name}"
            if not data.passed:
                self.failed_checks.append(label)
            self._say(f"      check {'ok  ' if data.passed else 'FAIL'} {label}")

    def _progress(self, grading_pass: str, done: int, total: int) -> None:
        from tqdm import tqdm

        if self.bar is None and total > 0 and done < total:
            self.bar = tqdm(total=total, desc=f"grading ({grading_pass})", unit="attempt", file=self.out,
                            leave=True, dynamic_ncols=True)
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            if done >= total:
                self._close_bar()

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def cmd_release(args: argparse.Namespace) -> int:
    quiet_dagster()
    import dagster as dg

    from assets import ASSETS
    from pipelines.defs.definitions import RELEASE_JOB, build_defs, release_run_config

    settings = settings_from_args(args)
    missing = [p for p in settings.inputs if not Path(p).is_file()]
    if missing:
        return fail("release", f"input {missing[0]} is not a file"
                     f"{f' (nor are {len(missing) - 1} other inputs)' if len(missing) > 1 else ''}; give JSON-lines "
                     "attempt files with --inputs (a vanished import: see `kerneltraj imports`)")
    home = ensure_dagster_home(settings)
    instance = dg.DagsterInstance.get()
    recover_stale_runs(instance)
    job = build_defs(settings).resolve_job_def(RELEASE_JOB)
    run_id = str(uuid.uuid4())  # chosen here so the progress listener can subscribe before the run starts
    stages = [a.key.to_user_string() for a in ASSETS]
    progress = ReleaseProgress(stages)
    instance.add_event_listener(run_id, progress)
    print(f"kerneltraj release {settings.release_version}: run {run_id}\n"
          f"  inputs    {', '.join(settings.inputs)}\n  warehouse {settings.warehouse_path}\n"
          f"  dagster   {home}", file=sys.stderr)
    # Dagster's own console logger would print every event; the listener above shows the stages instead.
    run_config = {**release_run_config(settings),
                  "loggers": {"console": {"config": {"log_level": "CRITICAL" if not args.verbose else "DEBUG"}}}}
    result = job.execute_in_process(instance=instance, run_id=run_id, raise_on_error=False, run_config=run_config,
                                    tags={RUN_TAG_PID: str(os.getpid()), RUN_TAG_HOST: socket.gethostname()})
    progress._close_bar()
    ok = result.success and not progress.failed_checks
    where = settings.releases_dir / settings.release_version
    if ok:
        print(f"release {settings.release_version} written to {where}", file=sys.stderr)
    else:
        print(f"release run {run_id} did not complete: "
              f"{'failed checks: ' + ', '.join(progress.failed_checks) if progress.failed_checks else 'a step failed'}"
              f" (inspect it with `kerneltraj ui`)", file=sys.stderr)
    return 0 if ok else 1


def cmd_publish(args: argparse.Namespace) -> int:
    """Run `publish_job` (the latest or the named release to the Hub), or write its exact commit with --dry-run."""
    quiet_dagster()
    import dagster as dg

    from pipelines.publishing.hub import UNCONFIGURED
    from pipelines.publishing.publish_record import read_publish_record
    from pipelines.defs.definitions import PUBLISH_JOB, build_defs
    from pipelines.publishing.hub import HubPublisher
    from pipelines.core.warehouse import connect, load_sql, query_dicts

    settings = dataclasses.replace(settings_from_args(args), **{k: v for k, v in (
        ("hub_endpoint", args.endpoint), ("hub_repo", args.repo)) if v})
    if args.version and not (settings.releases_dir / args.version).is_dir():
        print(f"kerneltraj publish: no release {args.version} under {settings.releases_dir}: build it with "
              f"`kerneltraj release --version {args.version}`, or leave out --version to publish the latest",
              file=sys.stderr)
        return 2
    if args.dry_run:
        version = args.version
        if not version:
            with connect(settings.warehouse_path, read_only=True) as con:
                latest = query_dicts(con, load_sql("release.latest"))
            if not latest:
                print("kerneltraj publish: no release recorded: run `kerneltraj release` first", file=sys.stderr)
                return 2
            version = latest[0]["version"]
        hub = HubPublisher(endpoint=settings.hub_endpoint, repo_id=settings.hub_repo or "<unset>")
        manifest = hub.dry_run(settings.releases_dir / version, version, Path(args.dry_run))
        print(json.dumps({"dry_run": str(manifest), "version": version, "repo_id": hub.repo_id}, indent=1))
        return 0
    if not settings.hub_repo:
        print(f"kerneltraj publish: {UNCONFIGURED}", file=sys.stderr)
        return 2
    ensure_dagster_home(settings)
    instance = dg.DagsterInstance.get()
    job = build_defs(settings).resolve_job_def(PUBLISH_JOB)
    run_config = {"ops": {"published_release": {"config": {"version": args.version or ""}}},
                  "loggers": {"console": {"config": {"log_level": "CRITICAL" if not args.verbose else "DEBUG"}}}}
    result = job.execute_in_process(instance=instance, raise_on_error=False, run_config=run_config,
                                    tags={RUN_TAG_PID: str(os.getpid()), RUN_TAG_HOST: socket.gethostname()})
    if not result.success:
        failure = next((e for e in result.all_events if e.is_step_failure), None)
        err = failure.step_failure_data.error if failure else None
        while err is not None and err.cause is not None:  # Dagster wraps ours: say the cause, not the wrapper
            err = err.cause
        why = err.message.strip() if err else "see `kerneltraj ui`"
        print(f"kerneltraj publish: run {result.run_id} failed: {why}", file=sys.stderr)
        return 1
    md = result.asset_materializations_for_node("published_release")[0].metadata
    record = read_publish_record(Path(md["record"].value).parent, md["tag"].value)
    print(json.dumps(record, indent=1, default=str))
    failed = [e.check_name for e in result.get_asset_check_evaluations() if not e.passed]
    if failed:
        print(f"kerneltraj publish: published, but the read-back check failed: {', '.join(failed)} "
              f"(inspect run {result.run_id} with `kerneltraj ui`)", file=sys.stderr)
        return 1
    return 0
