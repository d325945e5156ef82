"""Load trusted Python source (a card's reference or expert) as a module backed by a real file.

Triton needs the source on disk to JIT a kernel, so the text is written into the sealed
parent's private working directory, which no worker can see.
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
