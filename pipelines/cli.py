"""The `kerneltraj` command: release, status, lineage, import, publish, ui.

`kerneltraj release` materialises the whole release in this process against a real Dagster
instance (DAGSTER_HOME, default <repo>/.kerneltraj/dagster_home), so the run, its logs, its
asset materialisations and its checks are all in the Dagster UI afterwards (`kerneltraj ui`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Sequence

from pipelines.resources import REPO_ROOT, Settings, import_registry_path

TEMPLATE_YAML = REPO_ROOT / "dagster_home" / "dagster.yaml"
RUN_TAG_PID = "kerneltraj/pid"
RUN_TAG_HOST = "kerneltraj/host"


def ensure_dagster_home(settings: Settings) -> Path:
    """DAGSTER_HOME as the user set it, or the project-local one created from dagster_home/dagster.yaml."""
    if os.environ.get("DAGSTER_HOME"):
        home = Path(os.environ["DAGSTER_HOME"])
    else:
        home = settings.state_dir / "dagster_home"
        os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copyfile(TEMPLATE_YAML, home / "dagster.yaml")
    return home


def _quiet_dagster() -> None:
    # Beta/preview warnings are for Dagster developers, not for someone making a release.
    warnings.filterwarnings("ignore", module=r"dagster.*")
    warnings.filterwarnings("ignore", message=r".*is currently in (beta|preview).*")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_stale_runs(instance: Any, out=sys.stderr) -> list[str]:
    """Fail our own runs whose process died (kill -9, power loss) and free their pool slots.

    Without this a killed run keeps its `gpu` pool slot forever and the next release waits on it.
    Only runs started by this CLI on this host are touched: their pid tag says who owned them."""
    import dagster as dg

    stale = []
    runs = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.STARTING,
                                                     dg.DagsterRunStatus.CANCELING],
                                           tags={RUN_TAG_HOST: socket.gethostname()}))
    for run in runs:
        pid = int(run.tags.get(RUN_TAG_PID, "0") or 0)
        if pid and pid != os.getpid() and not _pid_alive(pid):
            instance.report_run_failed(run, f"process {pid} that ran it is gone; marked failed by kerneltraj")
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
            stale.append(run.run_id)
            print(f"recovered stale run {run.run_id} (its process {pid} died)", file=out)
    return stale


class ReleaseProgress:
    """Dagster event listener: stage names as they start and finish, a tqdm bar while grading."""

    def __init__(self, stages: Sequence[str], out=sys.stderr):
        self.stages = list(stages)
        self.out = out
        self.bar = None
        self.started: dict[str, float] = {}
        self.failed_checks: list[str] = []

    def _say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.out)
        else:
            print(text, file=self.out, flush=True)

    def __call__(self, entry: Any) -> None:
        from assets.grading import parse_progress

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


def settings_from_args(args: argparse.Namespace) -> Settings:
    s = Settings.from_env()
    changes: dict[str, Any] = {}
    for flag, field in (("warehouse", "warehouse_path"), ("state_dir", "state_dir")):
        if getattr(args, flag, None):
            changes[field] = Path(getattr(args, flag)).resolve()
    if changes.get("state_dir") and not getattr(args, "warehouse", None):
        # A new state folder without an explicit warehouse means the warehouse inside it.
        changes["warehouse_path"] = changes["state_dir"] / "warehouse.duckdb"
        changes["releases_dir"] = changes["state_dir"] / "releases"
    for flag, field in (("version", "release_version"), ("mode", "grader_mode"),
                        ("revalidation_mode", "revalidation_mode"), ("workers", "workers"), ("profile", "profile"),
                        ("timeout_s", "timeout_s"), ("retries", "retries")):
        if getattr(args, flag, None) is not None:
            changes[field] = getattr(args, flag)
    if getattr(args, "inputs", None):
        changes["inputs"] = tuple(str(Path(p).resolve()) for p in args.inputs)
    return dataclasses.replace(s, **changes)


def cmd_release(args: argparse.Namespace) -> int:
    _quiet_dagster()
    import dagster as dg

    from assets import ASSETS
    from pipelines.definitions import RELEASE_JOB, build_defs

    settings = settings_from_args(args)
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
    run_config = {"loggers": {"console": {"config": {"log_level": "CRITICAL" if not args.verbose else "DEBUG"}}}}
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


def _instance_or_none(settings: Settings) -> Any:
    import dagster as dg

    home = ensure_dagster_home(settings)
    return dg.DagsterInstance.get() if (home / "dagster.yaml").exists() else None


def cmd_status(args: argparse.Namespace) -> int:
    _quiet_dagster()
    from pipelines.status import build_status
    from pipelines.warehouse import connect

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        status = build_status(con, _instance_or_none(settings))
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=False, default=str))
    else:
        rel, led = status.get("release", {}), status.get("ledger", {})
        print(f"release {rel.get('version')} ({rel.get('path')})")
        print(f"ledger: {led.get('attempts_in')} in, {led.get('unaccounted')} unaccounted, "
              f"states {led.get('terminal_states')}")
        print("tables: " + ", ".join(f"{k}={v}" for k, v in status.get("tables", {}).items()))
        failed = [c["name"] for c in status.get("checks", []) if c["passed"] is not True]
        print(f"checks: {len(status.get('checks', [])) - len(failed)} passed"
              + (f", not passed: {', '.join(failed)}" if failed else ""))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    _quiet_dagster()
    from pipelines.lineage import RecordNotFound, render_text, trace
    from pipelines.warehouse import connect, load_sql, query_dicts

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        latest = query_dicts(con, load_sql("status.latest_release"))
        try:
            t = trace(con, args.record_id, _instance_or_none(settings), latest[0] if latest else None)
        except RecordNotFound as e:
            print(str(e), file=sys.stderr)
            return 2
    print(json.dumps(t, indent=2, default=str) if args.json else render_text(t))
    return 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    """List the quarantined rows of the last ingest: where each came from, and why."""
    from pipelines.warehouse import connect, load_sql, query_dicts

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        rows = query_dicts(con, load_sql("ingest.quarantine_rows"), {"reason": args.reason})
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    for r in rows:
        print(f"{r['origin']}\t{r['reason_code']}\t{r['attempt_id'] or '-'}\t{r['reason']}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["reason_code"]] = counts.get(r["reason_code"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    print(f"{len(rows)} quarantined row(s)" + (f": {summary}" if summary else ""), file=sys.stderr)
    return 0


UNDECODABLE = frozenset({"bad_encoding", "bad_json"})
"""Reason codes of records that are not text of the format at all (as opposed to a bad field)."""


def undecodable_files(batch) -> dict[str, tuple[int, int]]:
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


def _write_jsonl(path: Path, rows: Sequence[dict]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True, default=list) + "\n" for r in rows))
    tmp.replace(path)  # a reader sees the old file or the new one, never half


def cmd_import(args: argparse.Namespace) -> int:
    """Run an importer and keep its output under <state>/imports/<format>/ for the next release."""
    from pipelines.importers import IMPORTERS

    if args.format not in IMPORTERS:
        print(f"unknown format {args.format!r}; known: {', '.join(sorted(IMPORTERS))}", file=sys.stderr)
        return 2
    settings = settings_from_args(args)
    batch = IMPORTERS[args.format].import_path([Path(p).resolve() for p in args.paths])
    refused = undecodable_files(batch)
    if refused:
        path, (bad, total) = next(iter(refused.items()))
        print(f"kerneltraj import: {path} is not a {args.format} corpus: {bad} of its {total} records are not "
              f"decodable JSON text; nothing was imported (check the format name and the file)", file=sys.stderr)
        return 2
    out = settings.state_dir / "imports" / args.format
    out.mkdir(parents=True, exist_ok=True)
    attempts = []
    for a in batch.attempts:
        d = dataclasses.asdict(a)
        # Ingest re-homes origins to this file's lines; the corpus's own file:line stays in extra.
        d["extra"] = {**d["extra"], "import_origin": d.pop("origin")}
        attempts.append(d)
    files = {"attempts": out / "attempts.jsonl", "quarantine": out / "quarantine.jsonl",
             "tasks": out / "tasks.jsonl", "claims": out / "claims.jsonl", "rejected": out / "rejected.jsonl"}
    _write_jsonl(files["attempts"], attempts)
    _write_jsonl(files["quarantine"], [dataclasses.asdict(q) for q in batch.quarantined])
    _write_jsonl(files["tasks"], [dataclasses.asdict(c) for c in batch.cards])
    _write_jsonl(files["claims"], batch.claims)
    _write_jsonl(files["rejected"], [dataclasses.asdict(q) for q in batch.rejected])
    reg_path = import_registry_path(settings.state_dir)
    registry = json.loads(reg_path.read_text()) if reg_path.is_file() else {}
    registry[args.format] = {**{k: str(v) for k, v in files.items()}, "sources": [str(Path(p).resolve())
                                                                                  for p in args.paths],
                             "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = reg_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(registry, indent=1, sort_keys=True))
    tmp.replace(reg_path)
    print(json.dumps({"format": args.format, "attempts": len(batch.attempts), "quarantined": len(batch.quarantined),
                      "tasks": len(batch.cards), "claims": len(batch.claims), "rejected": len(batch.rejected),
                      "written_to": str(out)}, indent=1))
    print("the next `kerneltraj release` ingests these attempts and task cards", file=sys.stderr)
    return 0


def cmd_publish(args: argparse.Namespace) -> int:
    """Run `publish_job` (the latest or the named release to the Hub), or write its exact commit with --dry-run."""
    _quiet_dagster()
    import dagster as dg

    from assets.publish import UNCONFIGURED, read_publish_record
    from pipelines.definitions import PUBLISH_JOB, build_defs
    from pipelines.hub import HubPublisher
    from pipelines.warehouse import connect, load_sql, query_dicts

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


def cmd_ui(args: argparse.Namespace) -> int:
    """`dg dev` (webserver + daemon, which the run queue needs) on this project's Dagster instance."""
    settings = settings_from_args(args)
    home = ensure_dagster_home(settings)
    dg_exe = shutil.which("dg")
    cmd = ([dg_exe, "dev", "--host", args.host, "--port", str(args.port)] if dg_exe else
           [sys.executable, "-m", "dagster", "dev", "-m", "pipelines.definitions",
            "-h", args.host, "-p", str(args.port)])
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={home})", file=sys.stderr)
    os.chdir(REPO_ROOT)  # dg finds the project through pyproject.toml's [tool.dg]
    os.execv(cmd[0], cmd)
    return 0  # not reached


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kerneltraj", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", help="project state folder (default <repo>/.kerneltraj)")
    p.add_argument("--warehouse", help="DuckDB warehouse file (default <state>/warehouse.duckdb)")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("release", help="materialise a complete dataset release in-process")
    r.add_argument("--version", help="release version (default v<package version>)")
    r.add_argument("--inputs", nargs="+", metavar="JSONL", help="attempt files (default demo/attempts.jsonl "
                                                                "demo/malformed.jsonl plus imports)")
    r.add_argument("--mode", choices=("zygote", "fresh"), help="grader worker mode of the primary pass")
    r.add_argument("--revalidation-mode", choices=("zygote", "fresh"), help="worker mode of the recheck")
    r.add_argument("--workers", type=int, help="grader worker processes")
    r.add_argument("--profile", choices=("auto", "cpu", "gpu"), help="size profile")
    r.add_argument("--timeout-s", type=float, help="per-attempt grading budget, seconds")
    r.add_argument("--retries", type=int, help="extra tries for infra errors")
    r.add_argument("-v", "--verbose", action="store_true", help="also print Dagster's own event log")
    r.set_defaults(fn=cmd_release)

    s = sub.add_parser("status", help="summary of the latest release")
    s.add_argument("--json", action="store_true", help="machine-readable JSON (a dict of sections)")
    s.set_defaults(fn=cmd_status)

    lin = sub.add_parser("lineage", help="a record's way back to its raw attempt and grading runs")
    lin.add_argument("record_id", help="attempt id (or a quarantined row's file:line)")
    lin.add_argument("--json", action="store_true")
    lin.set_defaults(fn=cmd_lineage)

    qua = sub.add_parser("quarantine", help="list the rows the last ingest quarantined: file:line, reason code, "
                                            "attempt id and reason")
    qua.add_argument("--reason", help="only this reason code (e.g. bad_json, unknown_task)")
    qua.add_argument("--json", action="store_true", help="one JSON array instead of tab-separated lines")
    qua.set_defaults(fn=cmd_quarantine)

    imp = sub.add_parser("import", help="import an external corpus (its attempts join the next release)")
    imp.add_argument("format", help="the corpus's layout: cuda-l1 (CUDA-L1 JSON lines, e.g. "
                                    "../shared/data/cuda-l1/h100.jsonl), kernelbench (KernelBench run and task "
                                    "folders) or flashinfer-bench (a FlashInfer-Bench trace set: definitions/, "
                                    "solutions/, traces/)")
    imp.add_argument("paths", nargs="+", help="files or folders of that corpus")
    imp.set_defaults(fn=cmd_import)

    pub = sub.add_parser("publish", help="publish the latest (or a named) release to a Hugging Face Hub repo")
    pub.add_argument("--version", help="release version to publish (default the latest release)")
    pub.add_argument("--dry-run", metavar="DIR", help="write the exact commit (manifest.json + files) to DIR; "
                                                      "no network")
    pub.add_argument("--endpoint", help="Hub base URL (default KERNELTRAJ_HUB_ENDPOINT or https://huggingface.co)")
    pub.add_argument("--repo", help="dataset repo namespace/name (default KERNELTRAJ_HUB_REPO)")
    pub.add_argument("-v", "--verbose", action="store_true", help="also print Dagster's own event log")
    pub.set_defaults(fn=cmd_publish)

    ui = sub.add_parser("ui", help="start the Dagster UI (webserver + daemon) on this project's instance")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.set_defaults(fn=cmd_ui)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
        # A missing warehouse or input file, or a file where a folder belongs: a usage problem, not a crash.
        print(f"kerneltraj {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
