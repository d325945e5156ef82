"""Typed messages between the sealed parent and a candidate's worker.

A frame is a JSON header plus an optional raw payload (tensor bytes). Nothing from the worker is
ever unpickled: the worker runs untrusted code, and pickle would hand it the parent.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import struct

_HDR = struct.Struct("!IQ")  # header length, payload length
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 34
"""What a trusted peer (the parent, to its worker) may send in one frame."""
REPLY_PAYLOAD_CAP = {"load": 256 << 20}
"""Most payload bytes the parent accepts in a worker's reply, by the op it answers. Only a load's
reply carries a payload (the extension binaries it built); tensors come through a sealed memfd and
every other reply is a header alone. A claim over the cap is refused before anything is allocated."""
_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class WireError(RuntimeError):
    """The peer closed the channel or sent something that is not a frame."""


class FrameError(WireError):
    """The peer sent bytes that are not a frame our side of the protocol ever writes (a forged frame)."""


def send(sock: socket.socket, header: dict, payload: bytes | memoryview = b"") -> None:
    h = json.dumps(header, allow_nan=True).encode()
    sock.sendall(_HDR.pack(len(h), len(payload)) + h)
    if payload:
        sock.sendall(payload)


def recv(sock: socket.socket, max_payload: int = MAX_PAYLOAD) -> tuple[dict, bytearray]:
    """One frame. Sizes are checked against the caps before a byte of the frame is buffered, and the
    payload is the one buffer it was read into (never copied), so a forged size costs nothing."""
    pre = _recv_exact(sock, _HDR.size)
    hlen, plen = _HDR.unpack(pre)
    if hlen > MAX_HEADER or plen > max_payload:
        raise FrameError(f"frame too large (header {hlen} B, payload {plen} B; this frame may carry at most "
                        f"{MAX_HEADER} B of header and {max_payload} B of payload)")
    try:
        header = json.loads(_recv_exact(sock, hlen))
    except ValueError as e:
        raise FrameError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FrameError("header is not a JSON object")
    return header, _recv_exact(sock, plen) if plen else bytearray()


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise WireError("channel closed by peer")
        got += k
    view.release()
    return buf


def send_fd(sock: socket.socket, header: dict, fd: int) -> None:
    """A frame whose payload is a file descriptor (a memfd holding tensor bytes): no copy through the socket."""
    send(sock, {**header, "_fd": True})
    socket.send_fds(sock, [b"F"], [fd])


def recv_fd(sock: socket.socket) -> int:
    data, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if data != b"F" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise WireError("expected exactly one file descriptor")
    return fds[0]


# ---- tensors through a shared memfd; torch is imported lazily so this module stays stdlib-only ----

def tensors_to_memfd(tensors: list) -> tuple[list[dict], int]:
    """Copy tensors (any device) into one anonymous shared file; returns their metas and its fd."""
    import mmap

    import torch

    metas, total = [], 0
    for t in tensors:
        n = t.numel() * t.element_size()
        metas.append({"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "offset": total,
                      "nbytes": n})
        total += (n + 63) // 64 * 64
    fd = os.memfd_create("kerneltraj-out", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, max(total, 1))
    with mmap.mmap(fd, max(total, 1)) as mm:
        buf = torch.frombuffer(mm, dtype=torch.uint8)
        for t, m in zip(tensors, metas):
            if m["nbytes"]:
                buf[m["offset"]:m["offset"] + m["nbytes"]].copy_(t.detach().contiguous().view(-1).view(torch.uint8))
        del buf
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)  # frozen: nothing can change the bytes after they are sent
    return metas, fd


def tensors_from_memfd(metas: list[dict], fd: int, device: str) -> list:
    """Read tensors written by tensors_to_memfd into fresh tensors on `device`; closes fd."""
    import mmap

    import torch

    try:
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
            raise WireError("shared buffer is not sealed against writes")
        size = os.fstat(fd).st_size
        need = max((m["offset"] + m["nbytes"] for m in metas), default=0)
        if need > size:
            raise WireError(f"shared buffer holds {size} bytes, the metas claim {need}")
        out = []
        with mmap.mmap(fd, max(size, 1), flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            buf = torch.frombuffer(mm, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
            for m in metas:
                dtype = getattr(torch, m["dtype"])
                raw = buf[m["offset"]:m["offset"] + m["nbytes"]]
                t = torch.empty([int(s) for s in m["shape"]], dtype=dtype, device=device)
                if m["nbytes"] != t.numel() * t.element_size():
                    raise WireError(f"tensor bytes {m['nbytes']} do not match shape {m['shape']} {m['dtype']}")
                if m["nbytes"]:
                    t.view(-1).view(torch.uint8).copy_(raw)
                out.append(t)
            del buf, raw
        return out
    finally:
        os.close(fd)
