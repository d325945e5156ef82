"""Cheat (threat 18): the softmax is done with plain torch ops, and the worker's own records of what launched are
forged from inside the call: its Triton launch hook keeps them where a candidate can reach them (the hook's globals
through `inspect.getclosurevars`, the output storages through the wrapper's keyword defaults, their attribute's
name built at run time, so no static check sees it), so the hook's record says the candidate's kernel ran and wrote
the output. The op-level observation (the ops every call records, and on a GPU the traced call's kernels) does not come
from that hook: the torch ops are seen there."""
import inspect

import triton
import triton.language as tl
import triton.runtime.jit as jit


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols):
    row = tl.program_id(0)
    cols = tl.arange(0, n_cols)
    tl.store(y_ptr + row * n_cols + cols, tl.load(x_ptr + row * n_cols + cols))


def run(x):
    e = (x - x.max(-1, keepdim=True).values).exp()
    y = e / e.sum(-1, keepdim=True)
    hook = jit.JITFunction.run
    launches = inspect.getclosurevars(hook).globals.get("LAUNCHES")
    if isinstance(launches, dict):
        launches["candidate:_softmax_row"] = launches.get("candidate:_softmax_row", 0) + 1
    for kept in (getattr(hook, "__kw" + "defaults__") or {}).values():
        if isinstance(kept, set):
            kept.add(y.untyped_storage().data_ptr())
    return y
