"""Device memory that one process frees must not reach the next process unscrubbed.

Why: keeping a task's reference answers across attempts (docs/call-boundary.md, the last section) is safe only
if nothing of a finished attempt's inputs or outputs survives into the next attempt's process. The one channel
the sandbox does not close is the device's memory: a block the driver hands to a new context without clearing
it would show the new process what the last one left there. This test is the precondition the design names:
a process fills most of the free device memory with a marker and exits without freeing it; a second process
then allocates as much, in one block and in many small ones, and must find no marker anywhere.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

MARKER = 0x6B7472616A5F3137
"""A 64-bit word no allocator or driver writes by itself ('ktraj_17' in ASCII)."""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"child failed ({done.returncode}): {done.stderr[-2000:]}"
    return done.stdout.strip()


def _fill_and_exit(fraction: float) -> int:
    """A child fills `fraction` of the free device memory with MARKER and exits without freeing; its byte count."""
    return int(_run(f"""
        import os, torch
        free, _ = torch.cuda.mem_get_info()
        n = int(free * {fraction}) // 8
        x = torch.full((n,), {MARKER}, dtype=torch.int64, device="cuda")
        torch.cuda.synchronize()
        assert int(torch.count_nonzero(x[-(1 << 20):] == {MARKER})) == 1 << 20  # the fill reached the end
        print(n * 8, flush=True)
        os._exit(0)  # no frees, no context teardown by Python: the driver alone reclaims it
    """))


def _search(fraction: float, block_mb: int | None) -> tuple[int, int]:
    """A child allocates `fraction` of the free memory uninitialised (one block, or blocks of `block_mb`) and
    counts marker words in it: (bytes searched, markers found)."""
    out = _run(f"""
        import torch
        free, _ = torch.cuda.mem_get_info()
        total = int(free * {fraction}) // 8 * 8
        block = total if {block_mb!r} is None else {block_mb or 0} << 20
        blocks, searched, found = [], 0, 0
        while searched + block <= total:
            b = torch.empty(block // 8, dtype=torch.int64, device="cuda")
            for part in b.split(1 << 27):  # 1 GiB at a time: the comparison's own memory stays small
                found += int(torch.count_nonzero(part == {MARKER}))  # .sum() of bools would make an int64 copy
            searched += block
            blocks.append(b)  # kept, so the next block is new memory and not this one again
        print(searched, found)
    """)
    searched, found = out.split()
    return int(searched), int(found)


@pytest.mark.parametrize("block_mb", [None, 64])
def test_memory_a_process_left_holds_nothing_of_it_for_the_next_process(block_mb):
    filled = _fill_and_exit(0.6)
    searched, found = _search(0.75, block_mb)
    print(f"\n[scrub] filled {filled / 2**30:.1f} GiB with the marker; the next process searched "
          f"{searched / 2**30:.1f} GiB in {'one block' if block_mb is None else f'{block_mb} MiB blocks'}: "
          f"{found} marker words")
    assert searched >= filled, "the second process could not allocate what the first one held"
    assert found == 0, f"{found} words of a finished process's device memory reached the next process"


def test_the_search_finds_a_marker_that_is_there():
    # The search itself must be able to fail: in one process, memory freed to torch's cache and allocated
    # again still holds the marker (the caching allocator does not clear), so the same search finds it.
    out = _run(f"""
        import torch
        n = (256 << 20) // 8
        x = torch.full((n,), {MARKER}, dtype=torch.int64, device="cuda")
        torch.cuda.synchronize()
        del x
        y = torch.empty(n, dtype=torch.int64, device="cuda")
        print(int(torch.count_nonzero(y == {MARKER})))
    """)
    assert int(out) > 0
