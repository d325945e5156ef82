"""Co-tenants of the contention replay: real processes that share the grading device.

    python -m pipelines.grading.cotenants {compute_hog,membw_hog,latency_service} --device cpu|cuda

Each program imports torch, warms up, prints one JSON `ready` line (pid, and the port for the
service), loops until SIGTERM, then prints one JSON `stopped` line with its iteration count.
On CUDA the hogs are a matmul loop and a large device copy loop; on the CPU the same programs
run on the CPU device with one thread each (rows are labelled with the device, so a CPU figure is
never shown as a GPU one). The latency service answers small requests on 127.0.0.1 and measures
its own per-request latency; `LoadDriver` sends it a steady request stream and counts errors.

`CoTenant` starts one program in its own session and stops it by process group, so nothing it
spawned outlives the setting.
"""
from __future__ import annotations

import argparse
import enum
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable



class Role(str, enum.Enum):
    """Closed set of co-tenant programs."""

    COMPUTE_HOG = "compute_hog"
    MEMBW_HOG = "membw_hog"
    LATENCY_SERVICE = "latency_service"


@dataclass(frozen=True)
class CoTenantReport:
    """What one co-tenant did, for the setting's row."""

    role: str
    """Role value."""
    pid: int
    """Process id (its process group id too)."""
    device: str
    """`cuda` or `cpu`."""
    ready_s: float
    """Seconds from start to its ready line (import + warm-up)."""
    iterations: int | None
    """Loop iterations (hogs) or requests served (service) reported at stop; None when it never said."""
    exit_code: int | None
    """Exit status after the stop (0 = clean SIGTERM handling)."""
    alive_during: bool
    """True when it was still running at the moment it was asked to stop."""
    gone: bool
    """True when no process of its group survived the stop."""


def child_env() -> dict[str, str]:
    """This process's environment for a child running one of our programs (`python -m pipelines...`), with the
    folder this process imported `pipelines` from first on PYTHONPATH: the child runs the same code, whether it
    is installed or a checkout on the parent's path."""
    spec = importlib.util.find_spec("pipelines")
    root = str(Path(next(iter(spec.submodule_search_locations))).parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}


class LineReader:
    """JSON lines from a child's pipe with a deadline (select on the raw fd, own buffer: a buffered
    file object would hide lines it already read from select)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._buf = b""

    def next_json(self, deadline: float, alive: Callable[[], bool]) -> dict | None:
        """The next JSON object line; None at EOF, at the deadline, or when `alive()` turns false."""
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a library's stray print; wait for our JSON line
                if isinstance(msg, dict):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if r:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return None
                self._buf += chunk
            elif not alive():
                return None


class CoTenant:
    """One co-tenant program as a context manager: started on enter, stopped (whole group) on exit."""

    def __init__(self, role: Role, device: str, ready_timeout_s: float = 120.0, stop_timeout_s: float = 10.0):
        self.role, self.device = Role(role), device
        self.ready_timeout_s, self.stop_timeout_s = ready_timeout_s, stop_timeout_s
        self.proc: subprocess.Popen | None = None
        self.ready: dict = {}
        self.report: CoTenantReport | None = None
        self._ready_s = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> "CoTenant":
        self._err = tempfile.TemporaryFile()
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.grading.cotenants", self.role.value, "--device", self.device],
            env=child_env(), stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL,
            start_new_session=True)  # its own process group: the stop reaches anything it spawned
        try:
            self.ready = self._read_line(started + self.ready_timeout_s)
        except BaseException:
            self.stop()
            raise
        self._ready_s = time.monotonic() - started
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _read_line(self, deadline: float) -> dict:
        assert self.proc is not None and self.proc.stdout is not None
        msg = LineReader(self.proc.stdout.fileno()).next_json(deadline, lambda: self.proc.poll() is None)
        if msg is None:
            if self.proc.poll() is None:
                raise TimeoutError(f"{self.role.value} not ready after {self.ready_timeout_s:.0f}s")
            raise RuntimeError(f"{self.role.value} exited with {self.proc.returncode}: {self._stderr_tail()}")
        return msg

    def _stderr_tail(self) -> str:
        self._err.seek(0)
        return self._err.read().decode("utf-8", "replace")[-800:]

    def stop(self) -> CoTenantReport:
        """SIGTERM the group, wait, SIGKILL what is left; report whether the group is gone."""
        if self.report is not None:
            return self.report
        assert self.proc is not None
        alive = self.proc.poll() is None
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=self.stop_timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
            out, _ = self.proc.communicate()
        iterations = None
        for line in (out or b"").decode("utf-8", "replace").splitlines():
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue
            if msg.get("event") == "stopped":
                iterations = int(msg["iterations"])
        gone = _group_gone(self.proc.pid)
        if not gone:  # something in the group ignored SIGTERM: make sure it does not outlive the setting
            _signal_group(self.proc.pid, signal.SIGKILL)
            time.sleep(0.2)
            gone = _group_gone(self.proc.pid)
        self._err.close()
        self.report = CoTenantReport(self.role.value, self.proc.pid, self.device, round(self._ready_s, 3),
                                     iterations, self.proc.returncode, alive, gone)
        return self.report


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass(frozen=True)
class ServiceStats:
    """The latency service's own figures over one window, plus the driver's error count."""

    requests: int
    """Requests the driver sent in the window."""
    errors: int
    """Requests that failed (non-200 answer, timeout or connection error)."""
    p50_ms: float | None
    """Median per-request latency the service measured itself, milliseconds."""
    p99_ms: float | None
    """99th percentile of that latency, milliseconds."""

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.requests if self.requests else None


class LoadDriver:
    """Sends the service a steady stream of small requests from a thread (open loop at `rate_hz`)."""

    def __init__(self, port: int, rate_hz: float = 50.0, timeout_s: float = 2.0):
        self.base = f"http://127.0.0.1:{port}"
        self.rate_hz, self.timeout_s = rate_hz, timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = self.errors = 0

    def _get(self, path: str) -> dict:
        with urllib.request.urlopen(self.base + path, timeout=self.timeout_s) as r:  # noqa: S310 (127.0.0.1)
            if r.status != 200:
                raise RuntimeError(f"status {r.status}")
            return json.loads(r.read())

    def _loop(self) -> None:
        gap = 1.0 / self.rate_hz
        nxt = time.monotonic()
        while not self._stop.is_set():
            self.sent += 1
            try:
                self._get("/infer")
            except Exception:  # noqa: BLE001 - every failed request is an error of the service, counted
                self.errors += 1
            nxt += gap
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def window(self, seconds: float | None = None) -> "LoadDriver":
        """Reset the service's counters and start sending (for `seconds`, or until `finish`)."""
        self._get("/stats?reset=1")
        self.sent = self.errors = 0
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        if seconds is not None:
            time.sleep(seconds)
        return self

    def finish(self) -> ServiceStats:
        self._stop.set()
        if self._thread:
            self._thread.join()
        s = self._get("/stats")
        return ServiceStats(self.sent, self.errors + int(s["errors"]), s["p50_ms"], s["p99_ms"])


# ---- the programs themselves (run in the child) ------------------------------------------------------

def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pipelines.grading.cotenants")
    ap.add_argument("role", choices=[r.value for r in Role])
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    import torch

    if args.device == "cpu":
        torch.set_num_threads(1)  # one core's worth of contention, on a shared CI machine
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    role = Role(args.role)
    if role is Role.LATENCY_SERVICE:
        return _serve(torch, args.device, sync, stop)
    if role is Role.COMPUTE_HOG:
        n = 8192 if cuda else 256
        a = torch.randn(n, n, device=args.device, dtype=torch.float16 if cuda else torch.float32)
        b = torch.randn_like(a)

        def step() -> None:
            torch.mm(a, b)
    else:
        nbytes = (2 << 30) if cuda else (32 << 20)  # far beyond any cache: every copy goes to memory
        src = torch.empty(nbytes, dtype=torch.uint8, device=args.device).random_(0, 255)
        dst = torch.empty_like(src)

        def step() -> None:
            dst.copy_(src)
    step()
    sync()
    _say({"event": "ready", "pid": os.getpid(), "device": args.device})
    iterations = 0
    while not stop.is_set():
        step()
        iterations += 1
        if iterations % 8 == 0:
            sync()  # keep the launch queue short so the hog stops promptly and load stays steady
    sync()
    _say({"event": "stopped", "iterations": iterations})
    return 0


def _serve(torch, device: str, sync, stop: threading.Event) -> int:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    x = torch.randn(256, 256, device=device)
    w = torch.randn(256, 256, device=device)
    lock = threading.Lock()
    state = {"lat": [], "errors": 0, "served": 0}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a) -> None:  # quiet: stderr is kept for start-up failures only
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/stats"):
                with lock:
                    lat = sorted(state["lat"])
                    body = {"served": len(lat), "errors": state["errors"],
                            "p50_ms": _q(lat, 0.5), "p99_ms": _q(lat, 0.99)}
                    if "reset=1" in self.path:
                        state["lat"], state["errors"] = [], 0
                return self._send(200, body)
            if self.path != "/infer":
                return self._send(404, {"error": "unknown path"})
            t0 = time.perf_counter()
            try:
                y = torch.relu(x @ w)
                sync()
                val = float(y[0, 0])
            except Exception as e:  # noqa: BLE001 - a failed request is answered 500 and counted
                with lock:
                    state["errors"] += 1
                return self._send(500, {"error": str(e)[:200]})
            ms = (time.perf_counter() - t0) * 1e3
            with lock:
                state["lat"].append(ms)
                state["served"] += 1
            self._send(200, {"ok": True, "v": val, "ms": ms})

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _say({"event": "ready", "pid": os.getpid(), "device": device, "port": server.server_address[1]})
    stop.wait()
    server.shutdown()
    _say({"event": "stopped", "iterations": state["served"]})
    return 0


def _q(xs: list[float], q: float) -> float | None:
    from pipelines.grading.agreement import quantile

    return round(quantile(xs, q), 4) if xs else None


def _say(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(_main())
