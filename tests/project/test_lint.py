"""ruff passes on the whole tree with the configuration in pyproject.toml ([tool.ruff]); CI runs it through here."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_ruff_passes():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert "No module named ruff" not in proc.stderr, "ruff is missing: pip install -e '.[dev]'"
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
