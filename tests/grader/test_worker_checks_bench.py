"""bench/worker_checks.py: the parts of a worker's checks after each request, timed in a worker built here, and the
parts `make_state_checks` makes each see a change of its own."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_the_bench_times_every_part_of_the_checks_in_a_real_worker():
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "worker_checks.py"), "--device", "cpu", "--n",
                           "5"], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split("\t") for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert rows[0][0] == "part"
    names = [r[0] for r in rows[1:]]
    assert names == ["interpreter: state", "interpreter: signals", "interpreter: dispatch", "interpreter: modules",
                     "interpreter, whole (Worker._state)", "integrity of the worker's objects"]
    assert all(float(r[1]) > 0 and float(r[2]) >= float(r[1]) for r in rows[1:])
    assert all(r[3].endswith("%") for r in rows[1:5])


def test_each_part_of_the_interpreters_check_sees_its_own_change():
    """Run in a fresh interpreter: each change is made after the checks and seen only by its part (the signals' part,
    which judges a new handler by where its code lies, is tested in test_call_boundary.py)."""
    code = """
import sys, torch
from grader import worker
checks = worker.make_state_checks(torch)
def seen():
    return {k for k, f in checks.items() if f()}
assert seen() == set(), seen()
torch.Tensor.kt_added = 1
assert seen() == {"state"}, seen()
del torch.Tensor.kt_added
lib = torch.library.Library("aten", "IMPL")
lib.impl("zero_", lambda t: t, "CPU")
assert seen() == {"dispatch"}, seen()
sys.modules["json"] = type(sys)("json")
assert "modules" in seen(), seen()
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
