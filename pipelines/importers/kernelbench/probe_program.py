"""The probe's program: it runs only in the grader's sandbox (`grader.confine.run_confined`), never in our process.

`probe._probe_program` sends this file's text headed by the source of `grader.inputs`, which defines
`make_inputs` (the sandbox hides our packages, so nothing of ours is imported here). It reads one JSON job per
line on stdin ({key, code, inputs, timeout_s, cpu_bytes, cpu_bytes_max}; `inputs` is resolved specs, or "task"
for a task whose own get_inputs makes them) and answers one JSON line per job: the output's shape and dtype,
the FLOPs of one call, the constructor arguments as literal text and, for "task", what get_inputs returned; or
{code, error}. Each reference runs on the `meta` device (shapes only), on the CPU only when it reads values and
its inputs are small. No `from __future__` here: this text follows another module's."""
import ast
import json
import signal
import sys

import torch
from torch.utils.flop_counter import FlopCounterMode

SHAPE_ONLY = []
"""Recurrent layers met in the current call (its FLOPs are then unknown)."""
OWN_INPUTS = []
"""What the current task's own get_inputs returned: per value {shape, dtype}, {scalar} or {other}."""
_RNN_FORWARD = {}


def _recurrent_meta(self, x, hx=None):
    # On meta, recurrent layers decompose per time step in Python (minutes for KernelBench's
    # LSTMs): a shape rule from the layer's documented layout replaces the run, FLOPs unknown.
    if x.device.type != "meta":
        return _RNN_FORWARD[type(self)](self, x, hx)
    SHAPE_ONLY.append(type(self).__name__)
    d = 2 if self.bidirectional else 1
    h_out = getattr(self, "proj_size", 0) or self.hidden_size
    batched = x.dim() == 3
    n = x.shape[0 if self.batch_first else 1] if batched else None
    out = torch.empty(*x.shape[:-1], d * h_out, dtype=x.dtype, device="meta")
    state = (d * self.num_layers,) + ((n,) if batched else ())
    h = torch.empty(*state, h_out, dtype=x.dtype, device="meta")
    if isinstance(self, torch.nn.LSTM):
        return out, (h, torch.empty(*state, self.hidden_size, dtype=x.dtype, device="meta"))
    return out, h


def _timeout(*_):
    raise TimeoutError("probe timed out")


def _own_inputs(ns, device):
    # the task's own get_inputs, seeded as a grade seeds it, on the CPU (then as meta tensors on meta)
    torch.manual_seed(0)
    values = list(ns["get_inputs"]())
    OWN_INPUTS[:] = [{"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} if type(v) is torch.Tensor
                     else {"scalar": v} if type(v) in (int, float, bool) else {"other": type(v).__name__}
                     for v in values]
    if device == "meta":
        return [torch.empty_like(v, device="meta") if type(v) is torch.Tensor else v for v in values]
    return values


def _inputs(specs, device):
    # the grader's own sampler (its source heads this program), so the probe sees what a grade will
    if device != "meta":
        return make_inputs(specs, 0, device)  # noqa: F821 - defined by grader.inputs, which heads this program
    return [make_inputs([s], 0, "cpu")[0] if s["dist"] == "scalar"  # noqa: F821 - as above
            else torch.empty(s["shape"], dtype=getattr(torch, s["dtype"]), device="meta") for s in specs]


def _literal_text(value):
    try:
        text = repr(value)
        return text if len(text) <= 4096 and ast.literal_eval(text) == value else None
    except Exception:
        return None


def _run(job, device):
    ns = {"__name__": "kernelbench_reference"}
    exec(compile(job["code"], "<reference>", "exec"), ns)
    SHAPE_ONLY.clear()
    with torch.device(device), torch.no_grad():
        torch.manual_seed(0)
        init = list(ns["get_init_inputs"]())
        init_text = _literal_text(init)
        model = ns["Model"](*init)
    with torch.no_grad():  # a task's own inputs are made on the CPU, outside the meta device
        inputs = _own_inputs(ns, device) if job["inputs"] == "task" else None
    with torch.device(device), torch.no_grad():
        if inputs is None:
            inputs = _inputs(job["inputs"], device)
        with FlopCounterMode(display=False) as counter:
            out = model(*inputs)
    return out, None if SHAPE_ONLY else int(counter.get_total_flops()), init_text


def _answer(job):
    res = {"key": job["key"]}
    try:
        signal.alarm(job["timeout_s"])
        try:
            out, flops, init = _run(job, "meta")
        except (RuntimeError, NotImplementedError) as e:  # data-dependent code cannot run on meta
            if "meta" not in str(e) or job["cpu_bytes"] > job["cpu_bytes_max"]:
                raise
            signal.alarm(job["timeout_s"])
            out, flops, init = _run(job, "cpu")
        if type(out) is torch.Tensor:
            res.update(shape=list(out.shape), dtype=str(out.dtype).replace("torch.", ""), flops=flops,
                       init_inputs=init, **({"own_inputs": OWN_INPUTS} if job["inputs"] == "task" else {}))
        else:
            res.update(code="multi_output", error=f"forward returns {type(out).__name__}, not one tensor")
    except BaseException as e:
        res.update(code="probe_failed", error=f"{type(e).__name__}: {str(e)[:300]}")
    finally:
        signal.alarm(0)
    return res


def main():
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # corpus prints must not corrupt our replies
    for c in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN):
        _RNN_FORWARD[c] = c.forward
        c.forward = _recurrent_meta
    with FlopCounterMode(display=False):  # warm up outside any task's clock
        torch.ones(2, 2) @ torch.ones(2, 2)
    signal.signal(signal.SIGALRM, _timeout)
    for line in sys.stdin:
        real_stdout.write(json.dumps(_answer(json.loads(line))) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    main()
