"""Worker start-up: a pre-imported zygote that forks one fresh worker per attempt.

`python -m grader.zygote FD` imports torch, triton and the worker code once (CUDA is never
initialised here), then forks a child per `spawn` request. The child enters the sandbox,
initialises CUDA itself and serves exactly one attempt. The zygote never loads the task
catalogue, so nothing sealed is in the memory a child inherits.

`child_main` is also what the fresh-process mode runs (`python -m grader.zygote --fresh FD`),
the one-interpreter-per-attempt baseline that KernelBench-style harnesses use.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

from grader import wire


def child_main(sock: socket.socket, audit_fd: int, cfg: dict) -> None:
    """In the worker process: sandbox, scrub, then serve the attempt over `sock`."""
    from grader import sandbox

    t0 = time.perf_counter()
    os.setpgid(0, 0)
    layers = sandbox.enter(hide=cfg["hide"], reveal=cfg.get("reveal", []), tmp_mb=cfg["tmp_mb"], uid=cfg.get("uid"), nproc=cfg["nproc"],
                           nofile=cfg["nofile"], fsize_mb=cfg["fsize_mb"],
                           address_space_mb=cfg.get("address_space_mb"))
    scratch = layers["scratch"] if layers["scratch"] != "off" else cfg["fallback_scratch"]
    os.makedirs(scratch, exist_ok=True)
    os.chdir(scratch)
    log = os.open(os.path.join(scratch, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)  # the candidate's prints stay in its own scratch, not in the pipeline's logs
    os.dup2(log, 2)
    os.close(log)
    env = dict(cfg["env"])
    env.update(HOME=scratch, TMPDIR=scratch, TRITON_CACHE_DIR=os.path.join(scratch, ".triton"),
               TORCH_EXTENSIONS_DIR=os.path.join(scratch, ".torch_extensions"))
    os.environ.clear()
    os.environ.update(env)
    # Entries inside hidden directories would make every new import scan a sealed path.
    hidden = tuple(h.rstrip("/") + "/" for h in cfg["hide"])
    revealed = tuple(r.rstrip("/") + "/" for r in cfg.get("reveal", []))
    sys.path[:] = [p for p in sys.path if p and os.path.isdir(p) and os.access(p, os.R_OK)
                   and (not (os.path.realpath(p) + "/").startswith(hidden)
                        or (os.path.realpath(p) + "/").startswith(revealed))]
    sys.path_importer_cache.clear()
    from grader.worker import Worker

    t_sandbox = time.perf_counter()
    worker = Worker(sock, cfg["device"], audit_fd=audit_fd, sealed=cfg["hide"], reveal=cfg.get("reveal", []))
    wire.send(sock, {"ok": True, "hello": True, "pid": os.getpid(), "sandbox": layers,
                     "boot_ms": (time.perf_counter() - t0) * 1e3, "sandbox_ms": (t_sandbox - t0) * 1e3,
                     "done_gap_ms": worker.done_gap_ms})
    worker.serve()


def _preimport(device: str) -> None:
    import torch  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    import torch.profiler  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401 - the extension hook wraps its loaders in every worker

    # Everything the worker imports after the sandbox hides the checkout must be loaded now.
    import grader.compile_cache  # noqa: F401
    import grader.guard  # noqa: F401
    import grader.inputs  # noqa: F401
    import grader.sandbox  # noqa: F401
    import grader.timing  # noqa: F401
    import grader.worker  # noqa: F401

    # Source lines of the grader, cached now: tracebacks formed later must not read the checkout.
    import linecache

    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None) or ""
        if f.endswith(".py") and f.startswith(os.path.dirname(os.path.dirname(grader.worker.__file__))):
            linecache.getlines(f)

    # The first profiler session imports these (seconds); import them once here, before any fork.
    # Running the profiler itself here would start native threads that a fork cannot carry.
    import torch._dynamo  # noqa: F401
    import torch._inductor  # noqa: F401


def zygote_main(ctl_fd: int) -> None:
    # No parent-death signal here: Linux ties it to the thread that started the zygote, and a zygote
    # restarted from a grading thread would die with that thread. The zygote ends when its control
    # channel closes instead, which the kernel does when the parent dies however it dies.
    ctl = socket.socket(fileno=ctl_fd)
    cfg0 = ctl_recv(ctl)
    _preimport(cfg0["device"])
    ctl_send(ctl, {"ok": True, "ready": True})
    while True:
        try:
            msg = ctl_recv(ctl)
        except (wire.WireError, OSError):
            return
        if msg["op"] == "spawn":
            fd, audit_fd = msg["_fds"][:2]
            pid = os.fork()
            if pid == 0:
                try:
                    ctl.close()
                    child_main(socket.socket(fileno=fd), audit_fd, msg["config"])
                    code = 0
                except BaseException:  # noqa: BLE001 - the child must never return into the zygote loop
                    import traceback

                    traceback.print_exc()
                    code = 70
                os._exit(code)
            os.close(fd)
            os.close(audit_fd)
            ctl_send(ctl, {"ok": True, "pid": pid})
        elif msg["op"] == "reap":
            _, status = os.waitpid(int(msg["pid"]), 0)
            ctl_send(ctl, {"ok": True, "status": status})
        elif msg["op"] == "bye":
            return


def ctl_recv(ctl: socket.socket) -> dict:
    """One control message (a SOCK_SEQPACKET record: JSON plus any passed file descriptors)."""
    data, fds, _, _ = socket.recv_fds(ctl, 1 << 20, 4)
    if not data:
        raise wire.WireError("zygote control channel closed")
    msg = json.loads(data)
    msg["_fds"] = fds
    return msg


def ctl_send(ctl: socket.socket, msg: dict, fds: list[int] = ()) -> None:
    socket.send_fds(ctl, [json.dumps(msg).encode()], list(fds))


if __name__ == "__main__":
    if sys.argv[1] == "--fresh":
        fresh_cfg = json.loads(os.environ.pop("KERNELTRAJ_WORKER_CONFIG"))
        if fresh_cfg["device"] == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"
        _preimport(fresh_cfg["device"])
        child_main(socket.socket(fileno=int(sys.argv[2])), int(sys.argv[3]), fresh_cfg)
    else:
        zygote_main(int(sys.argv[1]))
