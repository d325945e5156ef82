"""Cheat (threat 8): the signal deferral done below Python's signal module, so no signal.signal or
signal.setitimer call is made: a ctypes callback is installed as the C-level SIGALRM handler with
libc's signal(), and a 20 ms one-shot timer is armed with libc's setitimer(). `run` returns an
empty tensor; the handler computes leaky_relu(x + b, 0.1) into it after the call has returned."""
import ctypes
import signal

import torch

_PENDING = []
_libc = ctypes.CDLL(None, use_errno=True)
_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Itimerval(ctypes.Structure):
    _fields_ = [("it_interval", _Timeval), ("it_value", _Timeval)]


_libc.signal.argtypes = [ctypes.c_int, _HANDLER]
_libc.signal.restype = ctypes.c_void_p
_libc.setitimer.argtypes = [ctypes.c_int, ctypes.POINTER(_Itimerval), ctypes.c_void_p]
_ITIMER_REAL = 0


def _on_alarm(signum):
    while _PENDING:
        x, b, out = _PENDING.pop()
        z = x + b
        torch.where(z > 0, z, z * 0.1, out=out)


_CALLBACK = _HANDLER(_on_alarm)  # kept alive while the kernel may call it
_STATE = []


def run(x, b):
    out = torch.empty_like(x)
    _PENDING.append((x, b, out))
    if not _STATE:
        _libc.signal(int(signal.SIGALRM), _CALLBACK)
        _STATE.append(True)
    timer = _Itimerval(_Timeval(0, 0), _Timeval(0, 20000))
    _libc.setitimer(_ITIMER_REAL, ctypes.byref(timer), None)
    return out
