"""Cheat (threat 10): call the op-recording switch through the foreign-function module (imported by a computed name) at an address read from libtorch's
own ELF symbol table and the process's memory map, with no symbol lookup for an audit hook to see; the
library call in between is unrecorded."""
_ff = __import__("ct" + "ypes")  # by a computed name: the runtime refusals are what this tests
import struct

import torch


def _mapped(fragment: str) -> tuple[str, int]:
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and fragment in parts[-1] and int(parts[2], 16) == 0:
                return parts[-1], int(parts[0].split("-")[0], 16)
    raise RuntimeError("not mapped")


def _symbol(path: str, wanted: bytes) -> int:
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for sh in sections:
        if sh[1] != 11:  # SHT_DYNSYM
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 24):
            name_off, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", data, off)
            start = strtab[4] + name_off
            if data[start:data.index(b"\0", start)] == wanted:
                return value
    raise RuntimeError("no symbol")


_path, _base = _mapped("libtorch_cpu")
_name = b"_Z" + b"N2at20enable" + b"Record" + b"FunctionEb"
_enable = _ff.CFUNCTYPE(None, _ff.c_bool)(_base + _symbol(_path, _name))


def run(x):
    _enable(False)
    y = torch.softmax(x, dim=-1)
    _enable(True)
    return y
