"""Cheat (threat 23): dereferences a null pointer through ctypes inside the call (SIGSEGV), hoping a
crash is recorded as an infrastructure failure and retried or skipped rather than floored."""
import ctypes


def run(x):
    ctypes.string_at(0)
    return x
