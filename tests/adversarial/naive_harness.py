"""A deliberately naive, KernelBench-style harness: the bar every planted cheat must clear.

It shows that each cheat in cheats/ is a real attack and not a strawman: run in-process the way
many public harnesses do it, the cheat looks correct. What makes the harness naive, on purpose:
- one fixed seed (42) and centred standard-normal inputs; weights 1 and biases 0 (module defaults);
- the reference runs first and its output is released before the candidate runs (as when it is
  moved to the host);
- one correctness call, checked after a short pause by any of three sloppy checks found in public
  harnesses: torch.allclose(atol=1e-2, rtol=1e-2) against the reference computed before the call,
  the same against the reference recomputed on the very tensors the candidate saw, or "99% of the
  elements within tolerance";
- the timing loop replays the same inputs and nobody looks at its outputs;
- no sandbox, no profiler, no thread or process checks, the candidate shares the interpreter.

Usage: python naive_harness.py CASES_JSON  (a JSON list of {"file", "task_id", "size"}); prints one
JSON object {file: {"accepted": bool, "detail": str}}. Every case runs in its own forked child with a scratch
folder of its own (two at a time), so a cheat that patches torch or the clocks cannot affect another one.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _inputs(card, size: dict, torch):
    """Centred randn for data, identity values for parameters (weights 1, biases 0)."""
    from grader.taskcard import resolve_shape

    torch.manual_seed(42)
    out = []
    for spec in card.inputs:
        shape = resolve_shape(spec.shape, size)
        dtype = getattr(torch, spec.dtype)
        if spec.dist == "randint":
            high = size[spec.high] if isinstance(spec.high, str) else int(spec.high)
            out.append(torch.randint(int(spec.low) if not isinstance(spec.low, str) else size[spec.low], high, shape))
        elif spec.name == "w" and card.family == "norm":
            out.append(torch.ones(shape, dtype=dtype))
        elif spec.name == "b" and len(shape) == 1:
            out.append(torch.zeros(shape, dtype=dtype))
        elif spec.name == "w" and card.family == "gemm":
            out.append((torch.rand(shape) * 2 - 1).mul_(shape[-1] ** -0.5).to(dtype))  # nn.Linear's init range
        else:
            out.append(torch.randn(shape).to(dtype))
    return out


def _reference(card, torch, workdir: str):
    from grader.modload import load_source

    ref = load_source(card.reference, f"kt_naive_ref_{card.task_id}", workdir).run

    def run(*inputs):
        args = [t.float() if t.is_floating_point() and t.dtype != torch.float32 else t for t in inputs]
        return ref(*args).to(getattr(torch, card.output_dtype))

    return run


def _check(case: dict, workdir: str) -> dict:
    import torch

    from grader.catalogue import load_catalogue

    card = load_catalogue()[case["task_id"]]
    inputs = _inputs(card, case["size"], torch)
    ref = _reference(card, torch, workdir)
    spec = importlib.util.spec_from_file_location("candidate", HERE / case["file"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["candidate"] = mod
    spec.loader.exec_module(mod)
    first = ref(*inputs)
    before = first.clone()
    del first  # "moved to the host": its block goes back to the allocator
    out = mod.run(*inputs)
    time.sleep(0.2)  # the harness does other work before it looks at the output
    after = ref(*inputs)
    passed = []
    if torch.allclose(out, before, atol=1e-2, rtol=1e-2):
        passed.append("allclose vs reference computed before the call")
    if torch.allclose(out, after, atol=1e-2, rtol=1e-2):
        passed.append("allclose vs reference recomputed on the same tensors")
    close = torch.isclose(out, before, atol=1e-2, rtol=1e-2)
    if float(torch.as_tensor(close).float().mean()) >= 0.99:
        passed.append(">= 99% of elements within tolerance")
    for _ in range(3):  # timing loop: same inputs, outputs unchecked
        mod.run(*inputs)
    return {"accepted": bool(passed), "detail": "; ".join(passed) or "rejected by all three naive checks"}


AT_ONCE = 2
"""Cases in flight at once. Each spends most of its time in the harness's pause, so two at a time keep a core
busy; each is still a child of its own with a scratch folder of its own, so neither can see the other."""
CASE_TIMEOUT_S = 120


def _start(case: dict, workdir: str, others: list[int]) -> tuple[int, int]:
    """Fork the child that checks `case` in `workdir`; (pid, read end of the pipe it answers on). The child
    closes `others`, the pipes of the cases in flight beside it."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        for fd in [r, *others]:
            os.close(fd)
        os.chdir(workdir)  # a scratch dir of its own, as a candidate would have
        try:
            msg = _check(case, workdir)
        except BaseException as e:  # noqa: BLE001 - reported, never raised into the parent
            msg = {"accepted": False, "detail": f"raised {type(e).__name__}: {e} "
                                                f"{traceback.format_exc().splitlines()[-2:]}"}
        os.write(w, json.dumps(msg).encode())
        os._exit(0)
    os.close(w)
    os.set_blocking(r, False)
    return pid, r


def _answer(data: bytes) -> dict:
    try:
        return json.loads(data.decode() or "null") or {"accepted": False, "detail": "no answer"}
    except ValueError:
        return {"accepted": False, "detail": f"unreadable answer {data[:200]!r}"}


def main(cases_path: str) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path.insert(0, str(REPO))
    import tempfile

    import torch
    import triton  # noqa: F401  (imported once here, inherited by every forked child)

    torch.set_num_threads(1)  # no OpenMP pool in the parent: forked children stay safe
    root = tempfile.mkdtemp(prefix="kt-naive-")
    todo = list(enumerate(json.loads(Path(cases_path).read_text())))
    answers: dict[int, dict] = {}
    running: dict[int, tuple[int, dict, int, float]] = {}  # pid -> (index, case, pipe, deadline)
    buffers: dict[int, bytes] = {}
    while todo or running:
        while todo and len(running) < AT_ONCE:
            i, case = todo.pop(0)
            beside = [pipe for _, _, pipe, _ in running.values()]
            pid, r = _start(case, tempfile.mkdtemp(prefix=f"case{i}-", dir=root), beside)
            running[pid] = (i, case, r, time.monotonic() + CASE_TIMEOUT_S)
            buffers[pid] = b""
        for pid, (i, case, r, deadline) in list(running.items()):
            try:
                buffers[pid] += os.read(r, 1 << 16)
            except BlockingIOError:
                pass
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                buffers[pid] += _drain(r)
            elif time.monotonic() >= deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            else:
                continue
            os.close(r)
            answers[i] = _answer(buffers.pop(pid))
            del running[pid]
        time.sleep(0.01)
    cases = json.loads(Path(cases_path).read_text())
    print(json.dumps({case["file"]: answers[i] for i, case in enumerate(cases)}))


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


if __name__ == "__main__":
    main(sys.argv[1])
