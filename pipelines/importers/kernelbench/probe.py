"""The output probe: each reference run once in the grader's sandbox (`grader.confine`), on the `meta` device
(shapes only; a real CPU run only for small references that read values), for its output shape and dtype, its
FLOPs, its constructor arguments and, where the task makes its own inputs, what those are. The program it runs
is `probe_program.py`, headed by the source of `grader.inputs`."""
from __future__ import annotations

import ast
import importlib.resources
import json
import math
from dataclasses import dataclass
from typing import Any

from pipelines.importers.base import TaskReject
from pipelines.importers.kernelbench.shapes import ELEM, IN_ELEM


@dataclass(frozen=True)
class ProbeResult:
    """Output of one reference call, measured on the meta device (shapes only)."""

    shape: tuple[int, ...]
    """Output tensor shape."""
    dtype: str
    """Output dtype name (`float32`, ...)."""
    flops: int | None
    """FLOPs torch's flop counter attributes to one call (None when unknown)."""
    init_inputs: str | None = None
    """Python literal text of what `get_init_inputs()` returned (None when it is not plain literals)."""
    own_inputs: tuple | None = None
    """What the task's own `get_inputs()` returned, when the probe ran it: per value {shape, dtype} of a tensor,
    {scalar} of a plain number, {other} of anything else."""


PROBE_TASK_TIMEOUT_S = 60
PROBE_CPU_BYTES_MAX = 256 << 20
"""A reference that cannot run on `meta` is run once on real CPU inputs only up to this size."""
PROBE_MEMORY_MB = 8192
PROBE_FILE_MB = 16


def _probe_program() -> str:
    """The probe, headed by the source of `grader.inputs` (stdlib and torch only): inputs are drawn by
    the same sampler as in a grade, never by the task's own `get_inputs`."""
    import inspect

    from grader import inputs

    program = importlib.resources.files(__package__).joinpath("probe_program.py").read_text()
    return inspect.getsource(inputs) + "\n" + program


def probe_outputs(jobs: dict[str, tuple[str, list]]) -> dict[str, ProbeResult | TaskReject]:
    """Probe each job (reference code, resolved input specs as `grader.inputs.resolve_specs` makes them)
    in the grader's sandbox.

    Never raises.

    The reference is corpus code: it runs only in `grader.confine`'s sandboxed child (no GPU, no
    network, the checkout and the host's other files hidden, an unprivileged uid, private /tmp,
    /proc and IPC, a scrubbed environment, an address-space cap) under a per-task alarm. If the
    child dies mid-way, the task it was on is marked failed and the rest are retried in a new one.
    """
    from grader.confine import run_confined

    out: dict[str, ProbeResult | TaskReject] = {}
    pending = list(jobs)
    while pending:
        payload = "".join(json.dumps({
            "key": k, "code": jobs[k][0], "inputs": jobs[k][1], "timeout_s": PROBE_TASK_TIMEOUT_S,
            "cpu_bytes_max": PROBE_CPU_BYTES_MAX,
            "cpu_bytes": (PROBE_CPU_BYTES_MAX + 1 if jobs[k][1] == "task" else  # unknown until it has run
                          sum(math.prod(s["shape"]) * IN_ELEM.get(s["dtype"], 8) for s in jobs[k][1]))}) + "\n"
            for k in pending)
        run = run_confined(_probe_program(), payload.encode(), 60 + PROBE_TASK_TIMEOUT_S * len(pending),
                           memory_mb=PROBE_MEMORY_MB, fsize_mb=PROBE_FILE_MB)
        stdout = run.stdout
        note = ("probe interpreter timed out" if run.timed_out
                else f"probe exited with {run.returncode}: {run.stderr[-300:]!r}")
        for line in stdout.decode("utf-8", "replace").splitlines():
            try:
                res = json.loads(line)
                key = res["key"]
            except (ValueError, KeyError, TypeError):
                continue
            if key in jobs and key not in out:
                out[key] = (ProbeResult(tuple(int(d) for d in res["shape"]), res["dtype"], res.get("flops"),
                                        _checked_literal(res.get("init_inputs")), _own_specs(res.get("own_inputs")))
                            if "shape" in res else TaskReject(res.get("code", "probe_failed"), res.get("error", "")))
        left = [k for k in pending if k not in out]
        if left:  # the child works in order, so the first task without an answer is the one it died on
            out[left[0]] = TaskReject("probe_failed", note)
        pending = left[1:]
    for k, v in list(out.items()):
        if isinstance(v, ProbeResult) and v.dtype not in ELEM:
            out[k] = TaskReject("unsupported_dtype", f"output dtype {v.dtype} is not one of {sorted(ELEM)}")
    return out



def _own_specs(seen: Any) -> tuple | None:
    """The probe's account of a task's own inputs as a tuple of dicts (None where it sent none)."""
    if not isinstance(seen, list):
        return None
    return tuple(dict(v) for v in seen if isinstance(v, dict))


def _checked_literal(text: Any) -> str | None:
    """The probe's literal text re-read here (the probe ran corpus code): a list, in canonical form."""
    if not isinstance(text, str) or len(text) > 4096:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return None
    return repr(value) if isinstance(value, list) else None
