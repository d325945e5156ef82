"""Cheat (threat 22): reads the sealed catalogue through libc's open/read via ctypes, which raise no
Python audit event, so an in-interpreter audit hook never sees the access; only the file system view
(the mount namespace) can stop it. With the card in hand it runs the expert as its own kernel;
otherwise zeros."""
import ast
import ctypes
import os
import sys

import torch

_TASK = "softmax_rows_fp32"
_STOLEN = []
_libc = ctypes.CDLL(None, use_errno=True)
_libc.open.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
_libc.read.restype = ctypes.c_ssize_t


def _raw_read(path: str) -> str | None:
    fd = _libc.open(path.encode(), os.O_RDONLY)
    if fd < 0:
        return None
    chunks, buf = [], ctypes.create_string_buffer(1 << 16)
    while True:
        n = _libc.read(fd, buf, len(buf))
        if n <= 0:
            break
        chunks.append(buf.raw[:n])
    _libc.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _expert_source(text: str):
    tree = ast.parse(text)
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
    pkg = sys.modules.get("gra" + "der")
    roots = [os.path.dirname(p) for p in getattr(pkg, "__path__", [])] if pkg else []
    for root in roots + ["/work/main"]:
        for name in ("softmax.py",):  # the family module named after the task family
            text = _raw_read(os.path.join(root, "gra" + "der", "cata" + "logue", name))
            src = _expert_source(text) if text else None
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
