"""Cheat (threat 22): looks for the task catalogue next to wherever the grader package was loaded from
(and in a few usual checkouts), reads this task's card and runs its expert kernel as its own. If no
catalogue can be read the call returns zeros, so it is floored either way if the sandbox holds."""
import ast
import glob
import os
import sys

import torch

_TASK = "softmax_rows_fp32"
_STOLEN = []


def _catalogue_dirs():
    roots = []
    pkg = sys.modules.get("gra" + "der")
    if pkg is not None:
        roots += [os.path.dirname(p) for p in getattr(pkg, "__path__", [])]
    roots += [p for p in sys.path if p] + os.environ.get("PYTHONPATH", "").split(":")
    roots += ["/work/main", "/work", os.getcwd(), os.path.expanduser("~")]
    dirs = [os.path.join(r, "gra" + "der", "cata" + "logue") for r in roots if r]
    dirs += glob.glob("/work/*/gra" + "der/cata" + "logue")
    return list(dict.fromkeys(dirs))


def _expert_source(path):
    tree = ast.parse(open(path).read())
    strings = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(k.arg == "task_id" and getattr(k.value, "value", None) == _TASK
                                              for k in node.keywords):
            for k in node.keywords:
                if k.arg == "expert":
                    return k.value.value if isinstance(k.value, ast.Constant) else strings.get(k.value.id)
    return None


def _steal():
    for d in _catalogue_dirs():
        for path in sorted(glob.glob(os.path.join(d, "*.py"))):
            try:
                src = _expert_source(path)
            except (OSError, SyntaxError, ValueError):
                continue
            if src:
                # Triton reads kernel source from disk: keep a copy and load it under this module's name
                copy = os.path.join(os.getcwd(), "borrowed_expert.py")
                with open(copy, "w") as f:
                    f.write(src)
                ns = {"__name__": __name__}
                exec(compile(src, copy, "exec"), ns)
                return ns["run"]
    return None


def run(x):
    if not _STOLEN:
        _STOLEN.append(_steal())
    fn = _STOLEN[0]
    return fn(x) if fn is not None else torch.zeros_like(x)
