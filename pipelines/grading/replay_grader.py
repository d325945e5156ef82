"""A grader in its own process, held open across the settings of a contention replay.

    python -m pipelines.grading.replay_grader --mode zygote --workers 1 [--device auto] [--catalogue-extra F]

The child builds one GraderService (grader/ only: no dagster, no duckdb), prints a JSON `ready`
line, then grades one batch per stdin line (a JSON list of GradeRequests) and answers with one
GradeResult JSON line per request and a `done` line. k such processes are k independent graders
(each its own device lock, its own expert timing), which is what "k graders time-slicing one
device" means; graders sharing one interpreter would also share the Triton runtime and the GIL.

`ProcessGrader` grades through such a process with the settings and retries of `pipelines.grading.client`.
"""
from __future__ import annotations

from pathlib import Path
import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any, Iterator

from grader.contract import GradeRequest, GradeResult
from pipelines.grading.client import GradeOutcome, GraderSpec, grade_with_retries
from pipelines.grading.cotenants import LineReader, child_env

READY_TIMEOUT_S = 300.0
"""Start-up budget of a grader process (imports, zygote, CUDA context)."""
RESULT_MARGIN_S = 60.0
"""Slack on top of the per-attempt budget before a silent grader process counts as lost."""


class ProcessGrader:
    """A grader (same settings, same retries as the resource) speaking to a long-lived grader process, started by
    `start` and ended by `close`. Plain Python: the device run uses it where Dagster is not installed."""

    def __init__(self, spec: GraderSpec) -> None:
        self.spec = spec
        self._proc: Any = None
        self._ready: dict = {}
        self._err: Any = None
        self._reader: Any = None
        self._device_arg = "auto"

    def request(self, attempt_id: str, task_id: str, source: str, language: str, entry_point: str,
                seed: int) -> GradeRequest:
        return self.spec.request(attempt_id, task_id, source, language, entry_point, seed)

    def grade(self, requests: list[GradeRequest]) -> Iterator[GradeOutcome]:
        return grade_with_retries(self.spec.retries, self._service_grade, requests)

    def start(self, device: str = "auto") -> "ProcessGrader":
        import tempfile

        self._device_arg, self._reader = device, None
        spec = self.spec
        cmd = [sys.executable, "-m", "pipelines.grading.replay_grader", "--mode", spec.mode,
               "--workers", str(spec.workers), "--device", device]
        for p in spec.task_files:
            cmd += ["--catalogue-extra", str(Path(p))]
        if spec.compile_cache:
            cmd += ["--compile-cache", spec.compile_cache]
        self._err = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(cmd, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err, start_new_session=True)
        try:
            self._ready = self._next(time.monotonic() + READY_TIMEOUT_S) or {}
            if self._ready.get("event") != "ready":
                raise RuntimeError(f"grader process did not start: {self._ready} {self.stderr_tail()}")
        except BaseException:
            self.close()
            raise
        return self

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def device(self) -> str:
        return self._ready["device"]

    @property
    def device_name(self) -> str:
        return self._ready["device_name"]

    def stderr_tail(self) -> str:
        if self._err is None:
            return ""
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")[-800:]

    def _next(self, deadline: float) -> dict | None:
        """The next protocol line, or None when the process is gone or silent past the deadline."""
        if self._reader is None:
            self._reader = LineReader(self._proc.stdout.fileno())
        return self._reader.next_json(deadline, lambda: self._proc.poll() is None)

    def _service_grade(self, batch: list[GradeRequest]) -> Iterator[GradeResult]:
        if self._proc is None or self._proc.poll() is not None:
            return  # a dead grader answers nothing: the resource retries or reports the requests as lost
        self._proc.stdin.write((json.dumps([dataclasses.asdict(r) for r in batch]) + "\n").encode())
        self._proc.stdin.flush()
        for _ in range(len(batch) + 1):
            msg = self._next(time.monotonic() + self.spec.timeout_s + RESULT_MARGIN_S)
            if msg is not None and msg.get("event") == "done":
                return
            if msg is None:
                # Silent past every attempt's budget, or gone: late answers would land in the next batch, so
                # this process is replaced; the resource retries the unanswered requests on the new one.
                self.close()
                self.start(self._device_arg)
                return
            yield GradeResult.from_json(json.dumps(msg))

    def close(self) -> None:
        """EOF ends the child's loop (it closes its service); a child that does not leave is killed."""
        if self._proc is None:
            return
        try:
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc.wait(timeout=30)
        except (subprocess.TimeoutExpired, OSError):
            pass
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)  # its zygote and any worker it left behind
        except ProcessLookupError:
            pass
        self._proc.wait()
        if self._err is not None:
            self._err.close()
            self._err = None


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.grading.replay_grader")
    ap.add_argument("--mode", choices=("zygote", "fresh"), default="zygote")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--catalogue-extra", action="append", default=[])
    ap.add_argument("--compile-cache", default=None)
    args = ap.parse_args(argv)
    # The protocol keeps its own copy of stdout; fd 1 then points at stderr, so a stray print cannot
    # corrupt (or forge) a result line.
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from grader.contract import request_from_json
    from grader.service import GraderService

    def say(obj: Any) -> None:
        proto.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        proto.flush()

    with GraderService(mode=args.mode, workers=args.workers, device=args.device,
                       catalogue_extra=args.catalogue_extra or None, compile_cache=args.compile_cache) as svc:
        say({"event": "ready", "pid": os.getpid(), "device": svc.device, "device_name": svc.device_name})
        for line in sys.stdin:
            if not line.strip():
                continue
            batch = [request_from_json(json.dumps(d)) for d in json.loads(line)]
            for result in svc.grade(batch):
                say(result.to_json())
            say({"event": "done"})
    return 0


if __name__ == "__main__":
    from grader.zygote import leave

    leave(_main())  # its service is closed: the replay need not wait for the teardown of torch and triton
