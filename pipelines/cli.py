"""The `kerneltraj` command: release, status, lineage, quarantine, import, imports, publish, ui.

`kerneltraj release` materialises the whole release in this process against a real Dagster
instance (DAGSTER_HOME, default <state>/dagster_home), so the run, its logs, its
asset materialisations and its checks are all in the Dagster UI afterwards (`kerneltraj ui`).
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import json
import os
import socket
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Sequence

from pipelines.core.settings import Settings, SettingsError

TEMPLATE_YAML = importlib.resources.files("dagster_home").joinpath("dagster.yaml")
"""The instance configuration every project-local DAGSTER_HOME starts from (package data)."""
DEFS_MODULE = "pipelines.definitions"
"""The module holding `defs`, the Definitions `dagster dev` and the UI load."""
RUN_TAG_PID = "kerneltraj/pid"
RUN_TAG_HOST = "kerneltraj/host"


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says where the help is (not the whole usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} -h`\n")


def _fail(command: str, message: str) -> int:
    """A problem the user can fix: one line on stderr naming the command, exit status 2."""
    print(f"kerneltraj {command}: {message}", file=sys.stderr)
    return 2


def _at_least(least: float, kind: type = int):
    """argparse type: a number of `kind` no smaller than `least`."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if not value >= least:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"{text} is less than {least:g}")
        return value
    return parse


def ensure_dagster_home(settings: Settings) -> Path:
    """DAGSTER_HOME as the user set it, or the project-local one created from dagster_home/dagster.yaml."""
    if os.environ.get("DAGSTER_HOME"):
        home = Path(os.environ["DAGSTER_HOME"])
    else:
        home = settings.state_dir / "dagster_home"
        os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(TEMPLATE_YAML.read_text())
    elif home == settings.state_dir / "dagster_home":
        _settle_nux(home / "dagster.yaml")
    return home


def _settle_nux(path: Path) -> None:
    """A project-local dagster.yaml made before the template turned Dagster's community pop-up off gets the
    template's `nux` setting (appended; nothing else of the file changes)."""
    import yaml

    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return  # Dagster itself says what is wrong with the file
    if isinstance(config, dict) and "nux" not in config:
        nux = yaml.safe_load(TEMPLATE_YAML.read_text())["nux"]
        with path.open("a") as f:
            f.write("\n" + yaml.safe_dump({"nux": nux}, default_flow_style=False))


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
    missing = [p for p in settings.inputs if not Path(p).is_file()]
    if missing:
        return _fail("release", f"input {missing[0]} is not a file"
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
    from pipelines.status import build_status, render_text
    from pipelines.core.warehouse import connect

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        status = build_status(con, _instance_or_none(settings))
    print(json.dumps(status, indent=2, sort_keys=False, default=str) if args.json else render_text(status))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    _quiet_dagster()
    from pipelines.lineage import RecordNotFound, render_text, trace
    from pipelines.core.warehouse import connect, load_sql, query_dicts

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        latest = query_dicts(con, load_sql("status.latest_release"))
        try:
            t = trace(con, args.record_id, _instance_or_none(settings), latest[0] if latest else None)
        except RecordNotFound as e:
            return _fail("lineage", f"{e}; give an attempt id or a file:line from the inputs of the last "
                         "release (`kerneltraj quarantine` lists the refused rows)")
    print(json.dumps(t, indent=2, default=str) if args.json else render_text(t))
    return 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    """List the quarantined rows of the last ingest: where each came from, and why."""
    from pipelines.core.warehouse import connect, load_sql, query_dicts

    settings = settings_from_args(args)
    with connect(settings.warehouse_path, read_only=True) as con:
        rows = query_dicts(con, load_sql("ingest.quarantine_rows"), {"reason": args.reason})
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    for r in rows:  # the corpus's own file:line for an imported row, ours otherwise
        print(f"{r['import_origin'] or r['origin']}\t{r['reason_code']}\t{r['attempt_id'] or '-'}\t{r['reason']}")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["reason_code"]] = counts.get(r["reason_code"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    print(f"{len(rows)} quarantined row(s)" + (f": {summary}" if summary else ""), file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Run an importer and keep its output under <state>/imports/<import id>/ for the next release."""
    from grader.catalogue import load_catalogue
    from pipelines.core import import_registry as reg
    from pipelines.importers import IMPORTERS, path_problem, refusal

    if args.format not in IMPORTERS:
        return _fail("import", f"unknown format {args.format!r}; known: {', '.join(sorted(IMPORTERS))}")
    settings = settings_from_args(args)
    paths = [Path(p).resolve() for p in args.paths]
    problem = path_problem(args.format, paths)
    if problem:
        return _fail("import", problem)
    batch = IMPORTERS[args.format].import_path(paths)
    problem = refusal(batch, paths)
    if problem:
        return _fail("import", problem)
    key = reg.import_id(args.format, paths)
    rows = reg.batch_rows(batch)
    conflicts = reg.card_conflicts(settings.state_dir, rows["tasks"], key)
    if conflicts:
        (task, other), more = conflicts[0], len(conflicts) - 1
        return _fail("import", f"task {task} of this import differs from the card import {other} holds"
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
            return _fail("imports", f"no import {args.remove!r}; known: "
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


def cmd_publish(args: argparse.Namespace) -> int:
    """Run `publish_job` (the latest or the named release to the Hub), or write its exact commit with --dry-run."""
    _quiet_dagster()
    import dagster as dg

    from assets.publish import UNCONFIGURED, read_publish_record
    from pipelines.definitions import PUBLISH_JOB, build_defs
    from pipelines.hub import HubPublisher
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


def cmd_ui(args: argparse.Namespace) -> int:
    """`dagster dev` (webserver + daemon, which the run queue needs) on this project's Dagster instance and
    settings, until it exits or we get SIGTERM, SIGINT or SIGHUP; then none of its processes is left
    (pipelines/supervise.py). It needs no checkout: the definitions are loaded as a module."""
    from pipelines.supervise import run_group

    settings = settings_from_args(args)
    home = ensure_dagster_home(settings)
    cmd = [sys.executable, "-m", "dagster", "dev", "-m", DEFS_MODULE, "-h", args.host, "-p", str(args.port)]
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={home})", file=sys.stderr)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    # The code server builds its Definitions from the environment: give it this command's paths.
    return run_group(cmd, cwd=settings.state_dir, env={**os.environ, **settings.path_env()})


def build_parser() -> argparse.ArgumentParser:
    from pipelines.importers import LAYOUTS

    p = _Parser(prog="kerneltraj", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", help="project state folder (default KERNELTRAJ_STATE_DIR or ./.kerneltraj)")
    p.add_argument("--warehouse", help="DuckDB warehouse file (default <state>/warehouse.duckdb)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("release", help="materialise a complete dataset release in-process")
    r.add_argument("--version", help="release version (default v<package version>)")
    r.add_argument("--inputs", nargs="+", metavar="JSONL", help="attempt files (default the imported corpora, or "
                                                                "the embedded demo corpus when none was imported)")
    r.add_argument("--mode", choices=("zygote", "fresh"), help="grader worker mode of the primary pass")
    r.add_argument("--revalidation-mode", choices=("zygote", "fresh"), help="worker mode of the recheck")
    r.add_argument("--workers", type=_at_least(1), help="grader worker processes, at least 1")
    r.add_argument("--profile", choices=("auto", "cpu", "gpu"), help="size profile")
    r.add_argument("--timeout-s", type=_at_least(0.001, float), help="per-attempt grading budget, seconds")
    r.add_argument("--retries", type=_at_least(0), help="extra tries for infra errors, 0 or more")
    r.add_argument("-v", "--verbose", action="store_true", help="also print Dagster's own event log")
    r.set_defaults(fn=cmd_release)

    s = sub.add_parser("status", help="summary of the latest release: ledger, checks, splits, revalidation, "
                                      "learning verdict")
    s.add_argument("--json", action="store_true", help="machine-readable JSON (a dict of sections)")
    s.set_defaults(fn=cmd_status)

    lin = sub.add_parser("lineage", help="a record's way back to its raw attempt and grading runs")
    lin.add_argument("record_id", help="attempt id, or the file:line of a row (admitted or quarantined)")
    lin.add_argument("--json", action="store_true", help="machine-readable JSON instead of text")
    lin.set_defaults(fn=cmd_lineage)

    qua = sub.add_parser("quarantine", help="list the rows the last ingest quarantined: file:line, reason code, "
                                            "attempt id and reason")
    qua.add_argument("--reason", help="only this reason code (e.g. bad_json, unknown_task)")
    qua.add_argument("--json", action="store_true", help="one JSON array instead of tab-separated lines")
    qua.set_defaults(fn=cmd_quarantine)

    imp = sub.add_parser("import", help="import an external corpus (its attempts join the next release)",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog="formats:\n" + "\n".join(f"  {name:<17} {layout}"
                                                         for name, (_, layout) in LAYOUTS.items()))
    imp.add_argument("format", choices=sorted(LAYOUTS), metavar="FORMAT",
                     help=f"the corpus's layout: {', '.join(LAYOUTS)} (what each reads: below)")
    imp.add_argument("paths", nargs="+", help="files or folders of that corpus (importing the same paths again "
                                              "replaces that import; other paths add one)")
    imp.set_defaults(fn=cmd_import)

    imps = sub.add_parser("imports", help="list the imports the next release reads, or remove one")
    imps.add_argument("--remove", metavar="IMPORT_ID", help="drop this import (an id from the list)")
    imps.add_argument("--json", action="store_true", help="one JSON array instead of tab-separated lines")
    imps.set_defaults(fn=cmd_imports)

    pub = sub.add_parser("publish", help="publish the latest (or a named) release to a Hugging Face Hub repo")
    pub.add_argument("--version", help="release version to publish (default the latest release)")
    pub.add_argument("--dry-run", metavar="DIR", help="write the exact commit (manifest.json + files) to DIR; "
                                                      "no network")
    pub.add_argument("--endpoint", help="Hub base URL (default KERNELTRAJ_HUB_ENDPOINT or https://huggingface.co)")
    pub.add_argument("--repo", help="dataset repo namespace/name (default KERNELTRAJ_HUB_REPO)")
    pub.add_argument("-v", "--verbose", action="store_true", help="also print Dagster's own event log")
    pub.set_defaults(fn=cmd_publish)

    ui = sub.add_parser("ui", help="start the Dagster UI (webserver + daemon) on this project's instance")
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    ui.add_argument("--port", type=_at_least(1), default=3000, help="port to listen on (default 3000)")
    ui.set_defaults(fn=cmd_ui)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
        # A missing warehouse or input file, or a file where a folder belongs: a usage problem, not a crash.
        return _fail(args.command, str(e))
    except SettingsError as e:
        return _fail(args.command, str(e))


if __name__ == "__main__":
    sys.exit(main())
