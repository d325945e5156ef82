"""The project's Dagster instance as commands use it: DAGSTER_HOME (made from the packaged template), quiet
Dagster warnings, and the recovery of runs whose process died."""
from __future__ import annotations

import importlib.resources
import os
import socket
import sys
import warnings
from pathlib import Path
from typing import Any

from pipelines.core.settings import Settings

TEMPLATE_YAML = importlib.resources.files("dagster_home").joinpath("dagster.yaml")
"""The instance configuration every project-local DAGSTER_HOME starts from (package data)."""
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


def quiet_dagster() -> None:
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


def instance_or_none(settings: Settings) -> Any:
    import dagster as dg

    home = ensure_dagster_home(settings)
    return dg.DagsterInstance.get() if (home / "dagster.yaml").exists() else None
