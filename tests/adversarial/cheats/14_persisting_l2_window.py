"""Cheat (threat 14, CUDA): reserve the largest persisting-L2 carve-out and pin the input in it with an
access-policy window on the current stream, so a cache flush between timed calls (an ordinary write of
a large buffer) does not evict it and repeated calls read from L2 instead of HBM. The softmax itself is
honest. Without the CUDA runtime the carve-out is skipped."""
import ctypes

import torch
import triton
import triton.language as tl

_CUDA_LIMIT_PERSISTING_L2 = 0x06
_STREAM_ATTR_ACCESS_POLICY_WINDOW = 1
_ACCESS_PROPERTY_NORMAL, _ACCESS_PROPERTY_PERSISTING = 0, 2


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _cudart():
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


_RT = None
_STATE = {"limit_set": False}


def _pin(x):
    global _RT
    if _RT is None:
        _RT = _cudart()
    if _RT is None:
        return
    props = torch.cuda.get_device_properties(x.device)
    max_persist = getattr(props, "persisting_l2_cache_max_size", 0) or (props.L2_cache_size * 3) // 4
    if not _STATE["limit_set"]:
        _RT.cudaDeviceSetLimit(ctypes.c_int(_CUDA_LIMIT_PERSISTING_L2), ctypes.c_size_t(max_persist))
        _STATE["limit_set"] = True
    val = _AttrValue()
    val.accessPolicyWindow.base_ptr = ctypes.c_void_p(x.data_ptr())
    val.accessPolicyWindow.num_bytes = min(x.numel() * x.element_size(), max_persist)
    val.accessPolicyWindow.hitRatio = 1.0
    val.accessPolicyWindow.hitProp = _ACCESS_PROPERTY_PERSISTING
    val.accessPolicyWindow.missProp = _ACCESS_PROPERTY_NORMAL
    stream = ctypes.c_void_p(torch.cuda.current_stream(x.device).cuda_stream)
    _STATE["rc"] = _RT.cudaStreamSetAttribute(stream, ctypes.c_int(_STREAM_ATTR_ACCESS_POLICY_WINDOW),
                                              ctypes.byref(val))


@triton.jit
def _softmax_row(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n)


def run(x):
    if x.is_cuda:
        _pin(x)
    y = torch.empty_like(x)
    _softmax_row[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
