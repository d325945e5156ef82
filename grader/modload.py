"""Load Python source we wrote (a demo card's expert or reference) as a module backed by a real file,
for tests, benchmarks and the builder of the experts' kernels (grader.expertseed, a process that runs only the
catalogue's experts). The grader itself never runs a card's code in its own process: references
run in a sandboxed worker (grader/session.py `_reference`), experts in a worker of their own.

Triton needs the source on disk to JIT a kernel, so the text is written into `workdir`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types


def load_source(source: str, name: str, workdir: str) -> types.ModuleType:
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    modname = f"{name}_{digest}"
    if modname in sys.modules:
        return sys.modules[modname]
    path = os.path.join(workdir, f"{modname}.py")
    with open(path, "w") as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod
