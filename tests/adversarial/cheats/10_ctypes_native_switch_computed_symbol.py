"""Cheat (threat 10): turn the op recording off below Python, by calling the op-recording switch in
libtorch through the foreign-function module (imported by a computed name), found by a symbol name assembled at run time; the library call is then unrecorded."""
_ff = __import__("ct" + "ypes")  # by a computed name: the runtime refusals are what this tests

import torch


def _libtorch() -> str:
    with open("/proc/self/maps") as f:
        for line in f:
            if "libtorch_cpu" in line:
                return line.split()[-1]
    return "libtorch_cpu.so"


_lib = _ff.CDLL(_libtorch())
_enable = getattr(_lib, "_Z" + "N2at20enable" + "Record" + "FunctionEb")
_enable.argtypes = [_ff.c_bool]


def run(x):
    _enable(False)
    y = torch.softmax(x, dim=-1)
    _enable(True)
    return y
