"""Cheat (threat 22): reaches the catalogue through other processes' views of the file system
(/proc/<pid>/root and /proc/<pid>/cwd of the grader and its zygote, which live outside the worker's
mount namespace), reads the sealed card and runs its expert. Nothing readable: zeros."""
import ast
import glob
import os
import sys

import torch

_TASK = "softmax_rows_fp32"
_STOLEN = []


def _catalogue_paths():
    pkg = sys.modules.get("gra" + "der")
    repo_dirs = [os.path.dirname(p) for p in getattr(pkg, "__path__", [])] if pkg else []
    repo_dirs += ["/work/main"]
    pids = [str(os.getppid()), "1"] + [p for p in os.listdir("/proc") if p.isdigit()][:64]
    for pid in dict.fromkeys(pids):
        yield f"/proc/{pid}/cwd/gra" + "der/cata" + "logue"
        for repo in repo_dirs:
            yield f"/proc/{pid}/root{repo}/gra" + "der/cata" + "logue"


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
    for d in _catalogue_paths():
        try:
            files = sorted(glob.glob(os.path.join(d, "*.py")))
        except OSError:
            continue
        for path in files:
            try:
                src = _expert_source(path)
            except (OSError, SyntaxError, ValueError):
                continue
            if src:
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
