"""Cheat (threat 10): the fill-on-touch torch function mode of 10_function_mode_entered_at_import,
but found and built without writing its names (the mode class is looked up by suffix in the
overrides module, the handler is attached under a name assembled at run time), and entered inside
`run` and left entered. `run` returns an empty tensor; the caller's first torch function on it
computes leaky_relu(x + b, 0.1) into it first."""
import torch

_PENDING = {}  # id(output) -> (x, b, output)
_STATE = {}


def _handler(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    if _PENDING:
        for a in list(args) + list(kwargs.values()):
            job = _PENDING.pop(id(a), None)
            if job is not None and job[2] is a:
                x, b, out = job
                z = x + b
                torch.where(z > 0, z, z * 0.1, out=out)
    return func(*args, **kwargs)


def _mode():
    if "mode" not in _STATE:
        module = getattr(torch, "over" + "rides")
        base = next(v for k, v in vars(module).items() if isinstance(v, type) and k.endswith("FunctionMode"))
        hook = "_".join(("", "", "torch", "function", "", ""))  # noqa: FLY002 - the name is never spelled
        _STATE["mode"] = type("_Quiet", (base,), {hook: _handler})()
    return _STATE["mode"]


def run(x, b):
    out = torch.empty_like(x)
    _PENDING[id(out)] = (x, b, out)
    if not _STATE.get("entered"):
        _mode().__enter__()  # left entered on purpose
        _STATE["entered"] = True
    return out
