"""`kerneltraj ui`: the Dagster UI (webserver and daemon) on this project's instance and settings."""
from __future__ import annotations

import argparse
import os
import sys

from pipelines.cli.args import settings_from_args
from pipelines.cli.instance import ensure_dagster_home

DEFS_MODULE = "pipelines.defs.definitions"
"""The module holding `defs`, the Definitions `dagster dev` and the UI load."""


def cmd_ui(args: argparse.Namespace) -> int:
    """`dagster dev` (webserver + daemon, which the run queue needs) on this project's Dagster instance and
    settings, until it exits or we get SIGTERM, SIGINT or SIGHUP; then none of its processes is left
    (pipelines/cli/supervise.py). It needs no checkout: the definitions are loaded as a module."""
    from pipelines.cli.supervise import run_group

    settings = settings_from_args(args)
    home = ensure_dagster_home(settings)
    cmd = [sys.executable, "-m", "dagster", "dev", "-m", DEFS_MODULE, "-h", args.host, "-p", str(args.port)]
    print(f"Dagster UI on http://{args.host}:{args.port} (DAGSTER_HOME={home})", file=sys.stderr)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    # The code server builds its Definitions from the environment: give it this command's paths.
    return run_group(cmd, cwd=settings.state_dir, env={**os.environ, **settings.path_env()})
