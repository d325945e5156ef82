"""Cheat (threat 17): top-k values by torch's own CPU kernel called through the foreign-function module (imported by a computed name), below the dispatcher, so no
op is recorded; the library's name and the kernel's symbol are assembled at run time."""
_ff = __import__("ct" + "ypes")  # by a computed name: the runtime refusals are what this tests

import torch

_lib = _ff.CDLL("lib" + "torch" + "_cpu.so")
_k = getattr(_lib, "_Z" + "N2at6" + "native23structured_topk_out_cpu4implERKNS_6TensorEllbbS4_S4_")
_k.restype = None
_k.argtypes = [_ff.c_void_p, _ff.c_void_p, _ff.c_int64, _ff.c_int64, _ff.c_bool, _ff.c_bool,
               _ff.c_void_p, _ff.c_void_p]
_this = _ff.create_string_buffer(256)
_ptr = "_c" + "data"


def run(x):
    x = x.contiguous()
    vals = torch.empty((x.shape[0], 8), dtype=x.dtype)
    idx = torch.empty((x.shape[0], 8), dtype=torch.int64)
    a, v, i = (_ff.c_void_p(getattr(t, _ptr)) for t in (x, vals, idx))
    _k(_ff.addressof(_this), _ff.addressof(a), 8, 1, True, True, _ff.addressof(v), _ff.addressof(i))
    return vals
