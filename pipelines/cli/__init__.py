"""The `kerneltraj` command: release, device-plan, status, lineage, quarantine, import, imports, publish, ui.

`kerneltraj release` materialises the whole release in this process against a real Dagster
instance (DAGSTER_HOME, default <state>/dagster_home), so the run, its logs, its
asset materialisations and its checks are all in the Dagster UI afterwards (`kerneltraj ui`).
"""
from __future__ import annotations

import argparse
from typing import Sequence

from pipelines.cli.args import Parser, at_least, fail, settings_from_args
from pipelines.cli.device import cmd_device_plan
from pipelines.cli.imports import cmd_import, cmd_imports
from pipelines.cli.instance import TEMPLATE_YAML, ensure_dagster_home
from pipelines.cli.records import cmd_lineage, cmd_quarantine, cmd_status
from pipelines.cli.jobs import cmd_publish, cmd_release
from pipelines.cli.ui import cmd_ui
from pipelines.core.settings import SettingsError

__all__ = ["TEMPLATE_YAML", "build_parser", "ensure_dagster_home", "main", "settings_from_args"]


def build_parser() -> argparse.ArgumentParser:
    from pipelines.importers import LAYOUTS

    p = Parser(prog="kerneltraj", description=__doc__.splitlines()[0])
    p.add_argument("--state-dir", help="project state folder (default KERNELTRAJ_STATE_DIR or ./.kerneltraj)")
    p.add_argument("--warehouse", help="DuckDB warehouse file (default <state>/warehouse.duckdb)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("release", help="materialise a complete dataset release in-process")
    r.add_argument("--version", help="release version (default v<package version>)")
    r.add_argument("--inputs", nargs="+", metavar="JSONL", help="attempt files (default the imported corpora, or "
                                                                "the embedded demo corpus when none was imported)")
    r.add_argument("--mode", choices=("zygote", "fresh"), help="grader worker mode of the primary pass")
    r.add_argument("--revalidation-mode", choices=("zygote", "fresh"), help="worker mode of the recheck")
    r.add_argument("--workers", type=at_least(1), help="grader worker processes, at least 1")
    r.add_argument("--profile", choices=("auto", "cpu", "gpu"), help="size profile")
    r.add_argument("--timeout-s", type=at_least(0.001, float), help="per-attempt grading budget, seconds")
    r.add_argument("--retries", type=at_least(0), help="extra tries for infra errors, 0 or more")
    r.add_argument("--device-records", metavar="DIR", help="take every grade from a device run's records folder "
                                                           "(bench/gpu_label_survival.py) instead of grading here")
    r.add_argument("-v", "--verbose", action="store_true", help="also print Dagster's own event log")
    r.set_defaults(fn=cmd_release)

    dp = sub.add_parser("device-plan", help="write every grade request a release of these inputs makes, for a GPU "
                                            "machine without Dagster (bench/gpu_label_survival.py)")
    dp.add_argument("--out", required=True, metavar="DIR", help="plan folder to write (carry it to the device)")
    dp.add_argument("--inputs", nargs="+", metavar="JSONL", help="attempt files, as `release --inputs` takes them")
    dp.add_argument("--mode", choices=("zygote", "fresh"), help="grader worker mode")
    dp.add_argument("--profile", choices=("auto", "cpu", "gpu"), help="size profile")
    dp.add_argument("--timeout-s", type=at_least(0.001, float), help="per-attempt grading budget, seconds")
    dp.add_argument("--retries", type=at_least(0), help="extra tries for infra errors, 0 or more")
    dp.set_defaults(fn=cmd_device_plan)

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
    ui.add_argument("--port", type=at_least(1), default=3000, help="port to listen on (default 3000)")
    ui.set_defaults(fn=cmd_ui)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args) or 0)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
        # A missing warehouse or input file, or a file where a folder belongs: a usage problem, not a crash.
        return fail(args.command, str(e))
    except SettingsError as e:
        return fail(args.command, str(e))
