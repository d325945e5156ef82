"""Typed messages between the sealed parent and a candidate's worker.

A frame is a JSON header plus an optional raw payload (tensor bytes). Nothing from the worker is
ever unpickled: the worker runs untrusted code, and pickle would hand it the parent.
"""
from __future__ import annotations

import json
import socket
import struct

_HDR = struct.Struct("!IQ")  # header length, payload length
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 1 << 34


class WireError(RuntimeError):
    """The peer closed the channel or sent something that is not a frame."""


def send(sock: socket.socket, header: dict, payload: bytes | memoryview = b"") -> None:
    h = json.dumps(header, allow_nan=True).encode()
    sock.sendall(_HDR.pack(len(h), len(payload)) + h)
    if payload:
        sock.sendall(payload)


def recv(sock: socket.socket) -> tuple[dict, bytes]:
    pre = _recv_exact(sock, _HDR.size)
    hlen, plen = _HDR.unpack(pre)
    if hlen > MAX_HEADER or plen > MAX_PAYLOAD:
        raise WireError(f"frame too large (header {hlen} B, payload {plen} B)")
    try:
        header = json.loads(_recv_exact(sock, hlen))
    except ValueError as e:
        raise WireError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    return header, _recv_exact(sock, plen) if plen else b""


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise WireError("channel closed by peer")
        got += k
    return bytes(buf)


# ---- tensors as (meta, bytes); torch is imported lazily so this module stays stdlib-only ----

def tensor_to_wire(t) -> tuple[dict, bytes]:
    import torch

    t = t.detach()
    data = t.contiguous().cpu()
    raw = data.view(torch.uint8).numpy().tobytes() if data.numel() else b""
    return {"shape": list(data.shape), "dtype": str(data.dtype).removeprefix("torch.")}, raw


def tensor_from_wire(meta: dict, raw: bytes, device: str):
    import torch

    dtype = getattr(torch, meta["dtype"])
    shape = [int(s) for s in meta["shape"]]
    if not raw:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape).to(device)
