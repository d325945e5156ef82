"""The first-failure ninja (grader.ninjastop): a build ends at its first failed command, with that command's verdict,
and the commands still running are stopped.

The command that never ends here is a real compiler reading a header that is a FIFO nobody writes: ninja without the
wrapper waits for it forever, so the tests of a failed build fail (by their timeouts) when the stop is removed, and
none depends on how fast this host compiles."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader import ninjastop
from grader.compile_cache import conclusive_failure

pytestmark = pytest.mark.skipif(shutil.which("c++") is None or shutil.which("ninja") is None,
                                reason="no C++ compiler or ninja here")

BAD = "int broken = ;\n"
NEVER_ENDS = '#include "fifo.h"\nint never;\n'


def _has_reader(fifo: Path) -> bool:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ENXIO:  # no process has it open for reading
            return False
        raise
    os.close(fd)
    return True


def _gone(fifo: Path, within_s: float = 15.0) -> bool:
    end = time.monotonic() + within_s
    while _has_reader(fifo):
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def _project(folder: Path, sources: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    os.mkfifo(folder / "fifo.h")
    rules = "rule cxx\n  command = c++ -c $in -o $out\n"
    for name, text in sources.items():
        (folder / name).write_text(text)
        rules += f"build {name[:-4]}.o: cxx {name}\n"
    (folder / "build.ninja").write_text(rules)


def test_a_failed_command_ends_the_build_and_stops_the_others(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"])  # install() puts the wrapper ahead on this process's PATH
    _project(tmp_path / "p", {"slow.cpp": NEVER_ENDS, "bad.cpp": BAD})
    folder = ninjastop.install(tmp_path / "scratch")
    assert folder and os.environ["PATH"].split(os.pathsep)[0] == folder
    assert shutil.which("ninja") == os.path.join(folder, "ninja")

    done = subprocess.run(["ninja", "-v", "-j", "4"], cwd=tmp_path / "p", capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout
    out = done.stdout
    assert "FAILED: bad.o" in out and "bad.cpp:1:14: error:" in out, out
    assert out.endswith(ninjastop.FAILED_END) and "interrupted" not in out, out
    assert conclusive_failure(out)  # filed as the compiler's verdict, replayed for the same program
    assert _gone(tmp_path / "p" / "fifo.h"), "the compile still running was not stopped"
    assert not (tmp_path / "p" / "slow.o").exists()
    # torch asks for the version before it builds: the real ninja answers
    version = subprocess.run(["ninja", "--version"], capture_output=True, text=True, timeout=30)
    assert version.returncode == 0 and version.stdout.strip()[0].isdigit()


def test_a_build_that_succeeds_is_the_real_ninja_s(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", os.environ["PATH"])
    _project(tmp_path / "p", {"one.cpp": "int one() { return 1; }\n", "two.cpp": "int two() { return 2; }\n"})
    ninjastop.install(tmp_path / "scratch")
    done = subprocess.run(["ninja", "-v"], cwd=tmp_path / "p", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout
    assert "[2/2]" in done.stdout and "FAILED" not in done.stdout
    assert (tmp_path / "p" / "one.o").exists() and (tmp_path / "p" / "two.o").exists()


def test_without_ninja_on_the_path_nothing_is_installed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ninjastop.install(tmp_path / "scratch") is None
    assert os.environ["PATH"] == str(tmp_path / "empty")


ATTEMPT = '''
import os
from torch.utils.cpp_extension import load

with open("slow.cpp", "w") as f:
    f.write({never!r})
with open("bad.cpp", "w") as f:
    f.write({bad!r})
os.mkfifo("fifo.h")
_ext = load(name="kt_first_failure_probe", sources=["slow.cpp", "bad.cpp"], extra_cflags=["-O0"],
            build_directory=os.getcwd(), verbose=False)


def run(x):
    return x
'''.format(never=NEVER_ENDS, bad=BAD)


@pytest.mark.slow
def test_a_builder_ahead_files_the_first_failure_without_waiting_for_the_rest(tmp_path: Path) -> None:
    """The build ahead of an attempt whose extension has a C++ object that fails and another that would compile for
    ever: with the service's `fail_fast_builds` it ends with the failed object's verdict, filed for the program."""
    from grader.buildahead import build
    from grader.compile_cache import BuildEnv, CompileCache, binding

    cache = CompileCache(tmp_path / "cache")
    env = BuildEnv.local("cpu")
    record = build(ATTEMPT, cache, env, 60.0, fail_fast=True)
    assert record["outcome"] == "failed" and record["failed"] == 1, record
    [entry] = cache.entries(binding(ATTEMPT, env))
    assert entry.failure
    text = (entry.path / "failure.txt").read_text()
    assert "bad.cpp:1:14: error:" in text, text
    # what it was built from, argument by argument, for telling apart a later grade's build of the same program
    [compiled] = record["compiled"]
    assert compiled["*"] == entry.material_sha256[:8] and {"sources", "extra_cflags", "name"} <= set(compiled)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
