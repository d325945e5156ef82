"""Cheat (threat 23): writes a forged frame header onto the grader's protocol socket, claiming a 4 GiB
payload, so the sealed parent buffers (and copies) gigabytes and runs out of memory: the attempt then
looks like an infrastructure failure, never a floor. The call itself computes an honest GELU."""
import math
import os
import socket
import stat
import struct


def _protocol_socket() -> int | None:
    for fd in range(3, 256):  # the protocol channel is handed to the worker before its audit channel
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                s = socket.socket(fileno=os.dup(fd))
                kind = s.type
                s.close()
                if kind == socket.SOCK_STREAM:
                    return fd
        except OSError:
            continue
    return None


def run(x):
    fd = _protocol_socket()
    if fd is not None:
        os.write(fd, struct.pack("!IQ", 2, 4 << 30) + b"{}")
    return 0.5 * x * (1.0 + __import__("torch").erf(x * (1.0 / math.sqrt(2.0))))
