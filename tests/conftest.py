"""Shared fixtures: repository paths, a small subset of the demo corpus, isolated project settings.

The suite runs on pytest-xdist workers (`-n 2 --dist loadgroup` in pyproject.toml): `pytest_collection_modifyitems`
below keeps the tests that share an expensive fixture on one worker and starts the longest groups first, and
`release_project` is materialised once per session however many workers ask for it."""
from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

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


TEST_REPLAY_SETTINGS = "isolated,compute_hog"
"""The contention replay of a test's release: isolated and one co-tenant (whose stop `cotenants_stopped` checks), not
all five, each of which starts programs that import torch (16.6 s of a 45 s release on two cores, 2026-12-07). The
five, with their real co-tenants, are tests/pipelines/grading/test_contention.py's."""


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
        "KERNELTRAJ_REPLAY_SETTINGS": TEST_REPLAY_SETTINGS,
        "DAGSTER_HOME": str(root / "dagster_home"),
    })
    return env


def run_cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`kerneltraj ARGS` run in this process, with `env` as its whole environment and `cwd` as its folder, as a
    finished process: exit status, stdout, stderr. The same code as the console script (`pipelines.cli.main`),
    without a fresh interpreter importing dagster, duckdb and torch again: seconds per command, more on two busy
    cores. For tests of what a command does; a test of the process itself (its one-line stderr, its exit, a kill)
    starts a real one, and so does one test of each of `release` and `publish` (tests/conftest.py's shared release,
    tests/pipelines/publishing/test_publish.py)."""
    from pipelines import cli

    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    with mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            os.chdir(cwd or here)
            code = cli.main(list(args))
        except SystemExit as e:  # argparse's usage errors and -h
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        finally:
            os.chdir(here)
    return subprocess.CompletedProcess(["kerneltraj", *args], code, out.getvalue(), err.getvalue())


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


# ---- one materialised release, shared by every test that only reads it ------------------------

RELEASE_TIMEOUT_S = 600
"""Bound on each `kerneltraj release` of the shared project: about two minutes alone on two cores, and more while
the other xdist workers grade beside it (240 s was not enough then)."""
VALIDATION_TASK = "cross_entropy_fp32"
HELDOUT_TASK = "attention_fp16"
"""A task of the held-out family `attention` (splits/split_manifest-v1.json)."""
CUDA_TASK = "gelu_fp32"
CUDA_ATTEMPT = "publish-test.cuda.gelu.t1"


def checkpoint_pair(out: Path) -> Path:
    """One baseline and one treatment attempt of the same task, both quick to grade on CPU.

    The release job also runs the learning comparison, which grades every checkpoint attempt each run;
    the demo's 40 would take minutes, and the release tests are not about that comparison
    (tests/pipelines/curation/test_learning.py is)."""
    ckpt = REPO_ROOT / "demo" / "checkpoints"
    base = [json.loads(ln) for ln in (ckpt / "baseline.jsonl").read_text().splitlines() if ln.strip()]
    treat = [json.loads(ln) for ln in (ckpt / "treatment.jsonl").read_text().splitlines() if ln.strip()]

    def quick(rec: dict) -> bool:
        return rec.get("extra", {}).get("intended") not in ("correct_fast", "hang")

    b = next(r for r in base if quick(r) and any(t["task_id"] == r["task_id"] and quick(t) for t in treat))
    t = next(r for r in treat if r["task_id"] == b["task_id"] and quick(r))
    (out / "baseline.jsonl").write_text(json.dumps(b) + "\n")
    (out / "treatment.jsonl").write_text(json.dumps(t) + "\n")
    return out


def split_attempts(lines: list[bytes]) -> list[bytes]:
    """Quick attempts (compile errors) on a validation task and on a task of a held-out family, so the release
    has rows in every split; plus a CUDA attempt, which a CPU grader cannot run (`unsupported_on_backend`)."""
    rows = [json.loads(ln) for ln in lines]
    out = [next(r for r in rows if r["task_id"] == task and r["extra"].get("intended") == "compile_error")
           for task in (VALIDATION_TASK, HELDOUT_TASK)]
    cuda = next(r for r in rows if r["task_id"] == CUDA_TASK and r["extra"].get("intended") == "compile_error")
    out.append({**cuda, "attempt_id": CUDA_ATTEMPT, "trajectory_id": CUDA_ATTEMPT, "turn": 1, "language": "cuda"})
    return [json.dumps(r).encode() for r in out]


def release_env(root: Path) -> dict[str, str]:
    """Environment of a release project folder: its inputs and checkpoint pair live in the folder itself."""
    env = project_env(root, (root / "attempts.jsonl", root / "malformed.jsonl"))
    env["KERNELTRAJ_CHECKPOINTS"] = os.pathsep.join(str(root / "checkpoints" / f) for f in ("baseline.jsonl",
                                                                                          "treatment.jsonl"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")])
    return env


@dataclass
class ReleaseProject:
    root: Path
    env: dict[str, str]
    release: subprocess.CompletedProcess
    """The second, completed `kerneltraj release`."""
    attempts_file: Path
    malformed_file: Path
    killed_run_grades: list[dict]
    """Grades the first, killed release had committed before it died."""

    @property
    def settings(self):
        from pipelines.core.settings import Settings

        return Settings.from_env(self.env)

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """`kerneltraj ARGS` on this project, in this process (`run_cli`)."""
        proc = run_cli(self.env, *args, cwd=self.root)
        if check:
            assert proc.returncode == 0, proc.stderr[-3000:]
        return proc

    def copy(self, dest: Path) -> Path:
        """A copy of the whole project folder (warehouse, Dagster instance, release) for a test that changes it."""
        shutil.copytree(self.root, dest)
        return dest

    def to_record(self) -> bytes:
        """What another xdist worker needs to use the same project folder (`from_record`); pickled, so the
        grades' timestamps come back as the same values a test compares with the warehouse."""
        rel = self.release
        return pickle.dumps({"root": str(self.root), "env": self.env, "attempts_file": str(self.attempts_file),
                             "malformed_file": str(self.malformed_file), "killed_run_grades": self.killed_run_grades,
                             "release": (rel.args, rel.returncode, rel.stdout, rel.stderr)})

    @classmethod
    def from_record(cls, data: bytes) -> "ReleaseProject":
        rec = pickle.loads(data)
        return cls(Path(rec["root"]), rec["env"], subprocess.CompletedProcess(*rec["release"]),
                   Path(rec["attempts_file"]), Path(rec["malformed_file"]), rec["killed_run_grades"])


def _kill_after_first_commit(root: Path, env: dict[str, str], warehouse: Path) -> list[dict]:
    """Start `kerneltraj release` and kill its whole process group (the CLI and its grader workers) as soon as a
    reader sees a committed grade; the grades committed by then."""
    first = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "release"], env=env, cwd=root,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    try:
        while time.monotonic() < deadline and first.poll() is None:
            if committed_grades(warehouse):
                os.killpg(first.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    return committed_grades(warehouse) or []


def pending_primary(warehouse: Path) -> list[dict]:
    """The attempts a release into `warehouse` has still to grade in its primary pass (read once no process writes)."""
    import duckdb

    from grader.contract import GRADER_VERSION
    from pipelines.core.warehouse import load_sql, query_dicts

    with contextlib.closing(duckdb.connect(str(warehouse), read_only=True)) as con:
        return query_dicts(con, load_sql("grading.pending_primary"), {"grader_version": GRADER_VERSION})


def committed_grades(warehouse: Path) -> list[dict] | None:
    """Grades visible to a reader now; None while the release holds the file's write lock."""
    import duckdb

    from pipelines.core.warehouse import query_dicts

    if not warehouse.exists():
        return []
    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.IOException:
        return None
    try:
        return query_dicts(con, "SELECT attempt_id, grading_pass, status, run_id, graded_at FROM graded_attempts")
    except duckdb.CatalogException:
        return []
    finally:
        con.close()


def write_release_inputs(root: Path, demo_files: tuple[Path, Path]) -> None:
    """The shared release's inputs: the cheat-rich demo subset (`select_subset`), the split attempts (rows in
    every split and one CUDA attempt), the first malformed lines and a quick checkpoint pair."""
    attempts, malformed = demo_files
    lines = [ln for ln in attempts.read_bytes().split(b"\n") if ln.strip()]
    picked = select_subset(lines)
    ids = {json.loads(ln)["attempt_id"] for ln in picked}
    picked += [ln for ln in split_attempts(lines) if json.loads(ln)["attempt_id"] not in ids]
    (root / "attempts.jsonl").write_bytes(b"\n".join(picked) + b"\n")
    bad = [ln for ln in malformed.read_bytes().split(b"\n") if ln.strip()][:SUBSET_MALFORMED_LINES]
    (root / "malformed.jsonl").write_bytes(b"\n".join(bad) + b"\n")
    (root / "checkpoints").mkdir()
    checkpoint_pair(root / "checkpoints")


def session_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every worker of this session sees: under xdist each worker's basetemp is `popen-gwN` inside
    the session's own temporary folder; without xdist it is the basetemp itself (its parent is shared by every
    session of this user)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def release_project(tmp_path_factory, demo_files) -> ReleaseProject:
    """One release materialised by the real CLI, once per session, for every test that only reads it
    (tests/assets/test_pipeline.py, tests/pipelines/publishing/test_publish.py,
    tests/pipelines/defs/test_browser.py): a first `kerneltraj release` is killed (SIGKILL, whole process group)
    once it has committed grades, then a second runs to completion.
    A test that changes the project works on `ReleaseProject.copy`.

    Built once per session, also under xdist: the first worker to ask builds it under a file lock in the
    session's shared folder and leaves a record of it there; the others wait on the lock and read the record.
    (The tests that use it are one xdist group, so normally one worker asks.)"""
    from filelock import FileLock

    shared = session_shared_dir(tmp_path_factory)
    record, failed = shared / "release_project.pickle", shared / "release_project.failed"
    with FileLock(str(shared / "release_project.lock")):
        if failed.is_file():
            pytest.fail(f"the shared release failed to build on another worker:\n{failed.read_text()}")
        if record.is_file():
            return ReleaseProject.from_record(record.read_bytes())
        try:
            project = _build_release_project(shared / "release_project", demo_files)
        except BaseException as e:
            failed.write_text(f"{type(e).__name__}: {e}"[-5000:])
            raise
        record.write_bytes(project.to_record())
        return project


KILL_TRIES = 3
"""Tries at killing the first release while its primary pass still has attempts to grade (`_build_release_project`).
Its grades are committed 8 at a time (`passes.COMMIT_EVERY`) and its primary pass has a dozen attempts (12 since the
demo's relabel in 68cdee3 changed which trajectories `select_subset` takes), so a kill that lands after the last few
were graded too has missed the scenario: the second release would grade nothing, and nothing would show that it
resumes (seen twice on 2026-12-07 with a 0.5 s poll)."""


def _build_release_project(root: Path, demo_files: tuple[Path, Path]) -> ReleaseProject:
    from pipelines.core.settings import Settings

    for _ in range(KILL_TRIES):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        write_release_inputs(root, demo_files)
        env = release_env(root)
        warehouse = Settings.from_env(env).warehouse_path
        kept = _kill_after_first_commit(root, env, warehouse)
        assert kept, "the first release never committed a grade before the deadline"
        if pending_primary(warehouse):
            break
    else:
        raise AssertionError(f"in {KILL_TRIES} tries the first release graded its whole primary pass before it was "
                             "killed: nothing would be left to resume")
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "release"], env=env, cwd=root,
                          capture_output=True, text=True, timeout=RELEASE_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return ReleaseProject(root, env, proc, root / "attempts.jsonl", root / "malformed.jsonl", kept)


# ---- xdist: which tests share a worker, and which start first ------------------------------------------------

def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker, torch computes on one thread, and so do the processes a test starts (they inherit
    OMP_NUM_THREADS): the workers already fill both cores, and a second OpenMP thread per process only spins at
    every barrier while another worker runs (measured: 20% more CPU time for the same test)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


SHARED_SESSION_FIXTURES = ("release_project",)
"""Session fixtures too expensive to build on every worker: the tests that use one are one xdist group."""
REQUESTED_AT_RUN_TIME = {"tests/pipelines/defs/test_browser.py::ui_url": "release_project"}
"""Fixtures that ask for a shared one through `request.getfixturevalue` (so only once they know they will run):
their tests join that fixture's group."""


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The expensive shared fixtures `item` uses (its whole fixture closure): the session ones above, and every
    module- or class-scoped one defined in a test module (its name prefixed with that module), except private
    helpers named `_...` (autouse set-up such as a scratch folder, cheap to make on every worker)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    out = []
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if not defs:
            continue
        fixturedef = defs[-1]
        if fixturedef.scope == "session" and name in SHARED_SESSION_FIXTURES:
            out.append(name)
        elif fixturedef.scope in ("module", "class", "package") and not name.startswith("_"):
            out.append(f"{item.nodeid.split('::')[0]}::{name}")
            if out[-1] in REQUESTED_AT_RUN_TIME:
                out.append(REQUESTED_AT_RUN_TIME[out[-1]])
    return out


def _xdist_groups(items: list[pytest.Item]) -> dict[pytest.Item, str]:
    """Tests linked through shared fixtures (directly, or through a test that uses two of them) form one group,
    named after its first fixture: each fixture is then built once, on the worker that runs its group."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    used = {item: _shared_fixtures(item) for item in items}
    for names in used.values():
        for other in names[1:]:
            parent[find(other)] = find(names[0])
    members: dict[str, list[str]] = {}
    for names in used.values():
        for n in names:
            members.setdefault(find(n), []).append(n)
    label = {root: min(ns, key=lambda n: (n not in SHARED_SESSION_FIXTURES, n)) for root, ns in members.items()}
    return {item: label[find(names[0])] for item, names in used.items() if names}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (`--dist loadgroup`): mark each test that shares an expensive fixture with its group, and put
    the long work first (the shared release's group, the groups holding a `slow` test, the `slow` tests, then
    the other groups and the rest), so the workers do not end on one long test each. Without xdist only the
    order changes; every test still runs."""
    groups = _xdist_groups(items)
    size: dict[str, int] = {}
    slow: set[str] = set()
    for item, g in groups.items():
        item.add_marker(pytest.mark.xdist_group(g))
        size[g] = size.get(g, 0) + 1
        if item.get_closest_marker("slow"):
            slow.add(g)
    position = {item: i for i, item in enumerate(items)}
    first_of: dict[str, int] = {}
    for item in items:
        if item in groups:
            first_of.setdefault(groups[item], position[item])

    def key(item: pytest.Item):
        g = groups.get(item)
        if g is None:
            return (2 if item.get_closest_marker("slow") else 4, 0, 0, position[item])
        rank = 0 if g in SHARED_SESSION_FIXTURES else 1 if g in slow else 3
        return (rank, -size[g], first_of[g], position[item])

    # Stable within a group and within a module: only whole groups and single tests move.
    items.sort(key=key)
