"""Typed messages between the sealed parent and a candidate's worker.

A frame is a JSON header plus an optional raw payload (tensor bytes). Nothing from the worker is
ever unpickled: the worker runs untrusted code, and pickle would hand it the parent.
"""
from __future__ import annotations

import _socket
import array
import fcntl
import json
import json.scanner
import math
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
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""The seals of a memfd that carries tensors: frozen, so nothing can change the bytes after they are sent."""
RESIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
"""The seals of a page both sides write (an arena, a launch gate's word): neither side can resize it, so
neither can pull pages out from under the other's mapping."""


class WireError(RuntimeError):
    """The peer closed the channel or sent something that is not a frame."""


class FrameError(WireError):
    """The peer sent bytes that are not a frame our side of the protocol ever writes (a forged frame)."""


# The frame path in C, bound when this module loads (before any candidate code exists in a worker): the JSON
# encoder and scanner objects and the socket methods of the C socket type. A worker's main thread sends its
# replies after candidate code has run in its process; a name looked up at that moment (json.dumps, a
# JSONEncoder method, socket.socket.sendall) could have been replaced to rewrite the reply.
_ENCODE = json.encoder.c_make_encoder(None, None, json.encoder.encode_basestring_ascii, None, ":", ",", False,
                                      False, True) if json.encoder.c_make_encoder is not None else None
_SCAN = json.scanner.c_make_scanner(json.JSONDecoder()) if json.scanner.c_make_scanner is not None else None
_SENDALL, _RECV_INTO = _socket.socket.sendall, _socket.socket.recv_into
_SENDMSG, _RECVMSG = _socket.socket.sendmsg, _socket.socket.recvmsg


def _dumps(header: dict, _enc=_ENCODE, _join="".join, _dumps=json.dumps) -> bytes:
    text = _join(_enc(header, 0)) if _enc is not None else _dumps(header, allow_nan=True, separators=(",", ":"))
    return text.encode()


def _loads(raw: bytearray, _scan=_SCAN, _loads=json.loads, _decode=bytearray.decode, _strip=str.strip):
    text = _strip(_decode(raw))
    if _scan is None:
        return _loads(text)
    obj, end = _scan(text, 0)
    if end != len(text):
        raise ValueError(f"extra data after the header's JSON at {end}")
    return obj


def send(sock: socket.socket, header: dict, payload: bytes | memoryview = b"", _enc=_dumps, _pack=_HDR.pack,
         _sendall=_SENDALL, _len=len, _gone=(BrokenPipeError, ConnectionResetError)) -> None:
    """One frame. A peer that died before it was sent (killed from outside, or by its own hand) is a closed
    channel, as in `recv`: a `WireError`, never an `OSError` (the parent would end the grade as its own error)."""
    h = _enc(header)
    try:
        _sendall(sock, _pack(_len(h), _len(payload)) + h)
        if payload:
            _sendall(sock, payload)
    except _gone as e:
        raise WireError(f"the peer closed the channel: {e}") from None


def recv(sock: socket.socket, max_payload: int = MAX_PAYLOAD, _unpack=_HDR.unpack, _loads=_loads,
         _isinstance=isinstance) -> tuple[dict, bytearray]:
    """One frame. Sizes are checked against the caps before a byte of the frame is buffered, and the
    payload is the one buffer it was read into (never copied), so a forged size costs nothing."""
    pre = _recv_exact(sock, _HDR.size)
    hlen, plen = _unpack(pre)
    if hlen > MAX_HEADER or plen > max_payload:
        raise FrameError(f"frame too large (header {hlen} B, payload {plen} B; this frame may carry at most "
                        f"{MAX_HEADER} B of header and {max_payload} B of payload)")
    try:
        header = _loads(_recv_exact(sock, hlen))
    except (ValueError, StopIteration) as e:
        raise FrameError(f"header is not JSON: {e}") from None
    if not _isinstance(header, dict):
        raise FrameError("header is not a JSON object")
    return header, _recv_exact(sock, plen) if plen else bytearray()


def _recv_exact(sock: socket.socket, n: int, _recv_into=_RECV_INTO, _memoryview=memoryview,
                _reset=ConnectionResetError) -> bytearray:
    buf = bytearray(n)
    view = _memoryview(buf)
    got = 0
    while got < n:
        try:  # a peer killed with our bytes unread resets the channel: it closed it all the same
            k = _recv_into(sock, view[got:], n - got)
        except _reset:
            k = 0
        if k == 0:
            raise WireError("channel closed by peer")
        got += k
    view.release()
    return buf


def send_fd(sock: socket.socket, header: dict, fd: int, _send=send, _sendmsg=_SENDMSG, _array=array.array,
            _sol=socket.SOL_SOCKET, _rights=socket.SCM_RIGHTS, _gone=(BrokenPipeError, ConnectionResetError)) -> None:
    """A frame whose payload is a file descriptor (a memfd holding tensor bytes): no copy through the socket."""
    _send(sock, {**header, "_fd": True})
    try:
        _sendmsg(sock, [b"F"], [(_sol, _rights, _array("i", [fd]))])
    except _gone as e:
        raise WireError(f"the peer closed the channel: {e}") from None


def recv_fd(sock: socket.socket, _recvmsg=_RECVMSG, _array=array.array, _close=os.close, _sol=socket.SOL_SOCKET,
            _rights=socket.SCM_RIGHTS, _space=socket.CMSG_SPACE(array.array("i").itemsize)) -> int:
    data, ancillary, _, _ = _recvmsg(sock, 1, _space)
    fds = _array("i")
    for level, kind, payload in ancillary:
        if level == _sol and kind == _rights:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    if data != b"F" or len(fds) != 1:
        for fd in fds:
            _close(fd)
        raise WireError("expected exactly one file descriptor")
    return fds[0]


# ---- tensors through a shared memfd; torch is imported lazily so this module stays stdlib-only ----

def _layout(tensors: list) -> tuple[list[dict], int]:
    """Where each tensor's bytes go in one buffer (64-byte aligned), and the bytes it needs."""
    metas, total = [], 0
    for t in tensors:
        n = t.numel() * t.element_size()
        metas.append({"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "offset": total,
                      "nbytes": n})
        total += (n + 63) // 64 * 64
    return metas, total


def _fill(buf, tensors: list, metas: list[dict], non_blocking: bool = False) -> None:
    """Copy each tensor (any device) into its place in `buf`, a uint8 tensor over shared memory; `non_blocking`:
    queued on the device's stream (`buf` page-locked), done once the stream is."""
    import torch

    for t, m in zip(tensors, metas):
        if m["nbytes"]:
            buf[m["offset"]:m["offset"] + m["nbytes"]].copy_(t.detach().contiguous().view(-1).view(torch.uint8),
                                                             non_blocking=non_blocking)


def _read(buf, size: int, metas: list[dict], device: str, pin: bool = False) -> list:
    """Fresh tensors on `device` (page-locked with `pin`, on the host) from the places `metas` claim in `buf` (`size`
    bytes); every claim is checked against the buffer before a byte is read: the writer is not trusted."""
    import torch

    need = max((m["offset"] + m["nbytes"] for m in metas), default=0)
    if need > size or any(m["offset"] < 0 or m["nbytes"] < 0 for m in metas):
        raise WireError(f"shared buffer holds {size} bytes, the metas claim {need}")
    out = []
    for m in metas:
        dtype, shape = getattr(torch, str(m["dtype"]), None), [int(s) for s in m["shape"]]
        if not isinstance(dtype, torch.dtype) or any(s < 0 for s in shape) \
                or m["nbytes"] != math.prod(shape) * dtype.itemsize:  # checked before anything is allocated
            raise WireError(f"tensor bytes {m['nbytes']} do not match shape {m['shape']} {m['dtype']}")
        t = torch.empty(shape, dtype=dtype, device=device, pin_memory=pin)
        if m["nbytes"]:
            t.view(-1).view(torch.uint8).copy_(buf[m["offset"]:m["offset"] + m["nbytes"]])
        out.append(t)
    return out


def tensors_to_memfd(tensors: list) -> tuple[list[dict], int]:
    """Copy tensors (any device) into one anonymous shared file; returns their metas and its fd."""
    import mmap

    import torch

    metas, total = _layout(tensors)
    fd = os.memfd_create("kerneltraj-out", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, max(total, 1))
    with mmap.mmap(fd, max(total, 1)) as mm:
        buf = torch.frombuffer(mm, dtype=torch.uint8)
        _fill(buf, tensors, metas)
        del buf
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)  # frozen: nothing can change the bytes after they are sent
    return metas, fd


def tensors_from_memfd(metas: list[dict], fd: int, device: str) -> list:
    """Read tensors written by tensors_to_memfd into fresh tensors on `device`; closes fd."""
    import mmap

    import torch

    try:
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
            raise WireError("shared buffer is not sealed against writes")
        size = os.fstat(fd).st_size
        with mmap.mmap(fd, max(size, 1), flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE) as mm:
            buf = torch.frombuffer(mm, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
            try:
                return _read(buf, size, metas, device)
            finally:
                del buf
    finally:
        os.close(fd)


def memfd_digest(fd: int, described: object) -> str:
    """blake2b of a memfd's bytes and of a JSON-able description of them (the metas, a layout)."""
    import hashlib
    import mmap

    h = hashlib.blake2b(json.dumps(described, sort_keys=True).encode(), digest_size=16)
    size = os.fstat(fd).st_size
    if size:
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
            h.update(mm)
    return h.hexdigest()


# ---- a launch gate's word: one page lent to a timing worker, which its stream waits on ----

GATE_FRAMES = {"drawn": {"gate": "drawn"}, "queued": {"gate": "queued"}, "done": {"gate": "done"},
               "settled": {"gate": "settled"}, "released": {"gate": "released"}}
"""The frames a worker sends before the reply to a gated call: its gate is closed (the call's untimed device
work, the inputs' draw, is done), the whole call is queued behind it, then the device is done with it
(grader.timing.DeviceClock.time_call); and, asked to (`settled` in the message, `Effort.settled_pairs`), once what
the call's thread queued as it ended is done too, before the interpreter is checked (`Worker._call`). Asked to
(`released`, `Effort.traced_release`), any call, gated or not, says "released" at the same point, before its
observation's sessions close (`Worker._call`)."""


class Futex:
    """The kernel's wait on a 32-bit word in memory shared between processes (`futex(2)`, not private): a gate's
    worker sleeps on its word until the parent's store of 1 and `wake` (`GateWord.open`), where it spun before. In a
    timed pair the two workers share a core (`launcher.slot_cpus`): the one whose call is not yet let through sleeps,
    as a worker waiting for its next message does, so the other sees its own end without a spinning neighbour.
    Bound once, at the C level: a candidate that later replaces `ctypes` reaches none of it. `ok` False where the
    machine's syscall number is unknown: `wait` then only yields the CPU."""

    WAIT, WAKE = 0, 1
    NR = {"x86_64": 202, "aarch64": 98}

    def __init__(self):
        import ctypes

        nr = self.NR.get(os.uname().machine)
        self.ok = nr is not None
        self._syscall = ctypes.CDLL(None, use_errno=True).syscall
        self._syscall.restype = ctypes.c_long
        self._long, self._ptr, self._int, self._u32 = ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32
        self._nr, self._timeout, self._byref = ctypes.c_long(nr or 0), ctypes.c_long * 2, ctypes.byref
        self._yield = os.sched_yield

    def wait(self, addr: int, expected: int, timeout_s: float) -> None:
        """Sleep while the word at `addr` still reads `expected`, at most `timeout_s`, or until woken; returns at
        once when it reads something else. A spurious or missed wake costs at most the timeout."""
        if not self.ok:
            self._yield()
            return
        ts = self._timeout(int(timeout_s), int((timeout_s % 1) * 1e9))
        self._syscall(self._nr, self._ptr(addr), self._int(self.WAIT), self._u32(expected), self._byref(ts), None,
                      self._int(0))

    def wake(self, addr: int) -> None:
        """Wake every process sleeping on the word at `addr`."""
        if self.ok:
            self._syscall(self._nr, self._ptr(addr), self._int(self.WAKE), self._int(1 << 30), None, None,
                          self._int(0))


class GateWord:
    """Parent side of a timing worker's launch gate (grader.timing.StreamGate): one page, sealed against
    resizing, lent to the worker before any candidate code runs. The worker's stream waits for its first
    word to read 1. This side opens it (`open`): once the worker says a gated call is queued and the device
    is free for it, or when the call has not said so in time (a call that waits for the device may hold
    the worker's GIL). The worker can write the page too; all it could do is open its own gates early,
    which times its calls as if there were none, beside whatever else runs on the device."""

    def __init__(self):
        import mmap
        import struct

        self._pack = struct.Struct("<I").pack_into
        self.fd = os.memfd_create("kerneltraj-gate", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, mmap.PAGESIZE)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, RESIZE_SEALS)
            self.mm = mmap.mmap(self.fd, mmap.PAGESIZE)
        except BaseException:
            os.close(self.fd)
            raise
        import ctypes

        self._cell = ctypes.c_uint32.from_buffer(self.mm)
        self._addr = ctypes.addressof(self._cell)
        self._futex = Futex()

    def open(self) -> None:
        """Store 1 (the device's wait ends) and wake the worker sleeping on the word (`Futex`)."""
        self._pack(self.mm, 0, 1)
        self._futex.wake(self._addr)

    def close(self) -> None:
        if self.fd is not None:
            del self._cell  # the page's buffer is exported to it until then
            self.mm.close()
            os.close(self.fd)
            self.fd = None


# ---- an arena: one shared buffer lent to a task reference's worker for all of its answers ----

ARENA_MAX = 1 << 30
"""Largest arena the parent lends (bytes); a bigger answer goes through a memfd of its own."""


def _cudart_alone(call: str, *args) -> int:
    """`torch.cuda.cudart().<call>(*args)` on a thread of its own; its error code. A refused page-locking
    leaves CUDA's per-thread last error behind, which the next kernel launch on the same thread would
    raise as its own; the throwaway thread takes it with it."""
    import threading

    import torch

    rc = [-1]
    t = threading.Thread(target=lambda: rc.__setitem__(0, int(getattr(torch.cuda.cudart(), call)(*args))),
                         name=f"kerneltraj-{call}")
    t.start()
    t.join()
    return rc[0]


class _Mapped:
    """A shared mapping of an arena's memfd as a uint8 tensor, page-locked when `pin` and CUDA allow."""

    def __init__(self, fd: int, nbytes: int, pin: bool, touch: bool):
        import mmap

        import torch

        self.nbytes = nbytes
        self.mm = mmap.mmap(fd, nbytes)
        self.buf = torch.frombuffer(self.mm, dtype=torch.uint8)
        if touch:  # every page made once, by the side that creates the arena, not by the first answer's copy
            self.buf.fill_(0)
        self.pinned = pin and _cudart_alone("cudaHostRegister", self.buf.data_ptr(), nbytes, 1) == 0

    def close(self) -> None:
        if self.mm is None:
            return
        if self.pinned:
            _cudart_alone("cudaHostUnregister", self.buf.data_ptr())
        self.buf = None
        self.mm.close()
        self.mm = None


class Arena(_Mapped):
    """Parent side. Lent to a task reference's worker for its answers, and to a slot's candidate workers for their
    fetched outputs (`Slot.lend_output_arena`). An answer of a task's reference (float64, as big as the output, often twice that with
    its error scale) used to cross the host through a fresh memfd each time: every page faulted in and
    zeroed twice over, about a second per answer at the largest sizes. The arena is made once per
    reference worker, sized for the card's largest answer, and the worker writes every answer into it.

    It is sealed against shrinking and growing before the worker gets it, so the worker can never pull
    pages out from under this side's mapping. It is not sealed against writes: the reference could
    change its answer while this side copies it, but a reference defines the task's truth anyway; what
    this side reads is checked against the arena's bounds and copied once, into tensors of its own."""

    def __init__(self, nbytes: int, pin: bool):
        nbytes = max(2 << 20, (nbytes + (2 << 20) - 1) // (2 << 20) * (2 << 20))
        self.fd = os.memfd_create("kerneltraj-arena", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, nbytes)
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, RESIZE_SEALS)
            super().__init__(self.fd, nbytes, pin, touch=True)
        except BaseException:
            os.close(self.fd)
            raise

    def read(self, metas: list[dict], device: str, pin: bool = False) -> list:
        return _read(self.buf, self.nbytes, metas, device, pin)

    def scrub(self) -> None:
        """Zero it all: an arena lent to one worker after another (a slot's candidates) hands none of them what
        the last one wrote there, the grader's copies or its own."""
        if self.buf is not None:
            self.buf.zero_()

    def close(self) -> None:
        super().close()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class ArenaView(_Mapped):
    """Worker side of an arena: the fd is mapped (then closed) and every answer written into it."""

    def __init__(self, fd: int, pin: bool):
        try:
            if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & RESIZE_SEALS != RESIZE_SEALS:
                raise WireError("arena is not sealed against resizing")
            super().__init__(fd, os.fstat(fd).st_size, pin, touch=False)  # the parent made the pages
        finally:
            os.close(fd)

    def write(self, tensors: list, non_blocking: bool = False) -> list[dict] | None:
        """The tensors' metas once written (queued, with `non_blocking`), or None when they do not fit (the caller
        uses a memfd)."""
        metas, total = _layout(tensors)
        if total > self.nbytes:
            return None
        _fill(self.buf, tensors, metas, non_blocking)
        return metas
