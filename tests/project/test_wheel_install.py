"""An installed kerneltraj works outside a checkout: the wheel, installed into a fresh virtual environment, makes a
release from a folder far from any source tree, reading its SQL, instance template and demo corpus as package
data and keeping its state where it was started.

The environment sees the system's packages (the pinned dependencies are already installed there) and gets only
kerneltraj itself from the wheel; the test checks that it imports that copy, not the checkout's editable one."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, TEST_REPLAY_SETTINGS, checkpoint_pair

SOURCES = ("pyproject.toml", "README.md", "pipelines", "assets", "grader", "sql", "demo", "dagster_home")
"""What a wheel is built from (a copy: a build leaves build/ and *.egg-info beside its sources)."""


def _bare_env(**extra: str) -> dict[str, str]:
    """This environment without anything that points into the checkout or at another project's state."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DAGSTER_HOME", "VIRTUAL_ENV") and not k.startswith("KERNELTRAJ_")}
    return {**env, **extra}


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info", ".kerneltraj")
    for name in SOURCES:
        item = REPO_ROOT / name
        if item.is_dir():
            shutil.copytree(item, src / name, ignore=ignore)
        else:
            shutil.copy2(item, src / name)
    env = _bare_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"),
          str(src)], cwd=root, env=env)
    [wheel] = (root / "dist").glob("kerneltraj-*.whl")
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root / "venv")], cwd=root,
         env=env)
    python = root / "venv" / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
         cwd=root, env=env)
    return root / "venv"


def _outside_any_checkout(path: Path) -> bool:
    return not any((p / ".git").exists() or (p / "pyproject.toml").exists() for p in (path, *path.parents))


def test_the_venv_imports_the_wheel_not_the_checkout(venv, tmp_path):
    where = tmp_path / "elsewhere"
    where.mkdir()
    assert _outside_any_checkout(where)
    code = ("import json, pipelines, sql, demo, dagster_home; from pipelines.core.settings import Settings; "
            "s = Settings.from_env({}); print(json.dumps({'pipelines': pipelines.__file__, 'sql': sql.__file__, "
            "'inputs': s.inputs, 'state': str(s.state_dir)}))")
    got = json.loads(_run([str(venv / "bin" / "python"), "-c", code], cwd=where, env=_bare_env()).stdout)
    for name in ("pipelines", "sql"):
        assert Path(got[name]).resolve().is_relative_to(venv.resolve()), got
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) and Path(p).is_file() for p in got["inputs"])
    assert got["state"] == str(where / ".kerneltraj")


@pytest.mark.slow
def test_an_installed_kerneltraj_makes_a_release_outside_a_checkout(venv, tmp_path, demo_subset):
    where = tmp_path / "lab"
    where.mkdir()
    assert _outside_any_checkout(where)
    attempts, malformed = demo_subset
    (where / "checkpoints").mkdir()
    checkpoint_pair(where / "checkpoints")  # two quick attempts: the demo's 40 take minutes to grade on CPU
    env = _bare_env(KERNELTRAJ_INPUTS=os.pathsep.join([str(attempts), str(malformed)]),
                    KERNELTRAJ_CHECKPOINTS=os.pathsep.join(str(where / "checkpoints" / f)
                                                           for f in ("baseline.jsonl", "treatment.jsonl")),
                    KERNELTRAJ_REVALIDATION_MODE="zygote", KERNELTRAJ_REPLAY_SETTINGS=TEST_REPLAY_SETTINGS)
    before = sorted(p.name for p in REPO_ROOT.iterdir())
    release = _run([str(venv / "bin" / "kerneltraj"), "release"], cwd=where, env=env, timeout=900)
    assert "written to" in release.stderr
    folder = next((where / ".kerneltraj" / "releases").glob("v*"))
    assert (folder / "README.md").is_file() and any(folder.rglob("*.parquet"))
    status = json.loads(_run([str(venv / "bin" / "kerneltraj"), "status", "--json"], cwd=where, env=env).stdout)
    assert status["release"]["version"] == folder.name and status["ledger"]["unaccounted"] == 0
    assert all(c["passed"] for c in status["checks"])
    passes = status["reliability"]["grading_passes"]  # the installed grader's workers graded every attempt
    assert passes["primary"]["graded"] > 0 and all(p["infra_errors"] == 0 for p in passes.values())
    assert sorted(p.name for p in REPO_ROOT.iterdir()) == before  # nothing written into the source tree
