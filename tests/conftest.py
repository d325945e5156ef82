"""Shared fixtures: repository paths, a small subset of the demo corpus, isolated project settings."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DEMO_DIR = Path(os.environ.get("KERNELTRAJ_DEMO_DIR") or REPO_ROOT / "demo")
"""The demo corpus (override to try the tests against another corpus of the same format)."""
SHARED_DATA = REPO_ROOT / ".." / "shared" / "data"

SUBSET_MAX_ATTEMPTS = 10
SUBSET_MALFORMED_LINES = 3
# Kinds that are slow on a CPU grader: a hang runs to its timeout, and a fast Triton kernel runs
# under TRITON_INTERPRET=1. The subset keeps the test file inside its time budget without them.
SLOW_INTENTS = ("hang", "correct_fast")


def _intent(rec: dict) -> str:
    return str((rec.get("extra") or {}).get("intended") or rec.get("intended") or "")


def select_subset(lines: list[bytes], max_attempts: int = SUBSET_MAX_ATTEMPTS) -> list[bytes]:
    """Whole trajectories of the demo corpus: cheat-rich first, never slow kinds, at most `max_attempts`.

    At least one trajectory with a correct kernel is kept so labels and rewards are exercised."""
    by_traj: dict[str, list[tuple[int, dict, bytes]]] = defaultdict(list)
    for i, raw in enumerate(lines):
        rec = json.loads(raw)
        by_traj[rec["trajectory_id"]].append((i, rec, raw))
    usable = {t: rows for t, rows in by_traj.items() if not any(_intent(r) in SLOW_INTENTS for _, r, _ in rows)}

    def cheats(rows: list) -> int:
        return sum(_intent(r).startswith("cheat:") for _, r, _ in rows)

    def correct(rows: list) -> bool:
        return any(_intent(r).startswith("correct") for _, r, _ in rows)

    ordered = sorted(usable, key=lambda t: (-cheats(usable[t]), len(usable[t]), t))
    with_correct = next((t for t in sorted(usable, key=lambda t: (len(usable[t]), t)) if correct(usable[t])), None)
    chosen: list[str] = [with_correct] if with_correct else []
    total = len(usable[with_correct]) if with_correct else 0
    for t in ordered:
        if t not in chosen and total + len(usable[t]) <= max_attempts:
            chosen.append(t)
            total += len(usable[t])
    picked = sorted(i for t in chosen for i, _, _ in usable[t])
    return [lines[i] for i in picked]


@pytest.fixture(scope="session")
def demo_files() -> tuple[Path, Path]:
    attempts, malformed = DEMO_DIR / "attempts.jsonl", DEMO_DIR / "malformed.jsonl"
    if not attempts.is_file() or not malformed.is_file():
        pytest.fail(f"demo corpus missing: {attempts} / {malformed} (built by demo/build_corpus.py)")
    return attempts, malformed


@pytest.fixture(scope="session")
def demo_subset(tmp_path_factory: pytest.TempPathFactory, demo_files: tuple[Path, Path]) -> tuple[Path, Path]:
    """attempts.jsonl + malformed.jsonl holding a small, fast slice of the demo corpus."""
    attempts, malformed = demo_files
    out = tmp_path_factory.mktemp("subset")
    lines = [ln for ln in attempts.read_bytes().split(b"\n") if ln.strip()]
    bad = [ln for ln in malformed.read_bytes().split(b"\n") if ln.strip()][:SUBSET_MALFORMED_LINES]
    (out / "attempts.jsonl").write_bytes(b"\n".join(select_subset(lines)) + b"\n")
    (out / "malformed.jsonl").write_bytes(b"\n".join(bad) + b"\n")
    return out / "attempts.jsonl", out / "malformed.jsonl"


def project_env(root: Path, inputs: tuple[Path, ...]) -> dict[str, str]:
    """Environment of an isolated project: its own state dir, splits dir, DAGSTER_HOME and inputs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELTRAJ_") and k != "DAGSTER_HOME"}
    env.update({
        "KERNELTRAJ_STATE_DIR": str(root / "state"),
        "KERNELTRAJ_SPLITS": str(root / "splits"),
        "KERNELTRAJ_INPUTS": os.pathsep.join(str(p) for p in inputs),
        # Both passes fork from a zygote here: a fresh interpreter per attempt costs seconds on CPU.
        "KERNELTRAJ_REVALIDATION_MODE": "zygote",
        "KERNELTRAJ_TIMEOUT_S": "60",
        "DAGSTER_HOME": str(root / "dagster_home"),
    })
    return env


@pytest.fixture()
def instance(tmp_path, monkeypatch):
    """A real Dagster instance of its own, configured from the project's dagster.yaml template."""
    import dagster as dg

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO_ROOT / "dagster_home" / "dagster.yaml").read_text())
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as inst:
        yield inst
