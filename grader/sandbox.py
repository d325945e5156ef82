"""Isolation of a candidate's worker process (runs in the worker, before candidate code loads).

Layers, each recorded in the grade so an auditor sees what was in force:
- its own mount namespace and a root of its own: a tmpfs holding bind mounts of what the worker may
  see (the system directories, the Python install), with the task catalogue, the project checkout,
  home directories and every other directory it may not see left as empty directories, and a fresh,
  size-limited /tmp; the worker pivots into it and the host's root is detached, so even
  /proc/self/mountinfo names no hidden path (`own_root`; where the host refuses, the hidden
  directories are covered by empty tmpfs mounts in place, which mountinfo lists by name);
- its own network namespace: no interface but a down loopback, so no connection succeeds;
- its own IPC namespace: SysV shared memory, semaphores and message queues it creates are not
  seen by any other attempt and are freed with it (POSIX shared memory lives in its private
  /dev/shm);
- its own PID namespace (the zygote forks it as the first process of a new one) and a /proc
  mounted for that namespace: it sees only its own processes;
- an unprivileged uid/gid of its own (per worker slot), no supplementary groups;
- resource limits: processes, open files, file size, core dumps, and address space on CPU;
- a scrubbed environment (built by the parent) and the parent-death signal.
A layer the host refuses (no privileges) is recorded as off, never silently assumed.
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import stat

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_BIND = 0x1000
MNT_DETACH = 0x2
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}.get(platform.machine())
STAGE = "/tmp"
"""Where the worker's new root is built before the pivot: the host's /tmp, which no worker ever sees
(it gets a fresh one), is covered in the worker's mount namespace only."""
ROOT_TMPFS = "size=1m"
"""The new root holds only directories, symlinks and empty files that bind mounts cover."""

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def enter(*, hide: list[str], reveal: list[str] = (), tmp_mb: int, uid: int | None, nproc: int, nofile: int,
          fsize_mb: int, address_space_mb: int | None, network: bool = False, pid_ns_off: str = "",
          own_root_off: str = "", cover: list[str] = ()) -> dict:
    """Apply every layer it can; return {layer: True/False or detail}. `pid_ns_off`, `own_root_off`: why
    the zygote's probe found the host refusing that layer (see `PidNamespaces`, `probe_own_root`). `cover`: device
    nodes this process must not reach (a CPU-only child's GPU: grader.confine), each covered by /dev/null."""
    layers: dict[str, object] = {}
    _libc.prctl(PR_SET_PDEATHSIG, 9, 0, 0, 0)
    layers["pdeathsig"] = True
    flags = CLONE_NEWNS | CLONE_NEWIPC | (0 if network else CLONE_NEWNET)
    try:
        _check(_libc.unshare(flags), "unshare")
        layers["mount_ns"] = layers["ipc_ns"] = True
        layers["net_ns"] = not network
    except OSError as e:
        layers["mount_ns"] = layers["ipc_ns"] = layers["net_ns"] = f"off: {e}"
    # The first process of a PID namespace has pid 1 in it (PidNamespaces.fork made it so).
    layers["pid_ns"] = True if os.getpid() == 1 else (pid_ns_off or "off: not forked into a PID namespace")
    if layers["mount_ns"] is True:
        _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
        fresh_proc = layers["pid_ns"] is True  # /proc of this namespace: no other process of the host is listed
        layers["own_root"] = own_root_off
        if not own_root_off:
            try:
                hidden, layers["old_root"] = _own_root(hide, reveal, tmp_mb, fresh_proc)
                layers["own_root"] = True
            except OSError as e:  # the host refuses a pivot: hide in place, as before the worker had a root of its own
                layers["own_root"] = f"off: {e}"
        if layers["own_root"] is not True:
            hidden = _hide_in_place(hide, reveal, tmp_mb, fresh_proc)
        layers["private_proc"] = layers["pid_ns"]
        layers["hidden_paths"] = hidden
        layers["tmp_mb"] = tmp_mb
        if cover:
            layers["covered_devices"] = _cover(cover)
    scratch = "/tmp/work" if layers["mount_ns"] is True else None
    if scratch:
        os.makedirs(scratch, mode=0o700, exist_ok=True)
    limits = {
        resource.RLIMIT_NOFILE: nofile,
        resource.RLIMIT_FSIZE: fsize_mb << 20,
        resource.RLIMIT_CORE: 0,
    }
    mapped_mb = _mapped_mb()
    if address_space_mb:  # a budget on top of what the pre-imported worker already maps
        limits[resource.RLIMIT_AS] = (mapped_mb + address_space_mb) << 20
    for which, value in limits.items():
        resource.setrlimit(which, (value, value))
    layers["rlimits"] = {"nofile": nofile, "fsize_mb": fsize_mb, "address_space_mb": address_space_mb,
                         "mapped_at_start_mb": mapped_mb}
    if uid is not None and os.geteuid() == 0:
        if scratch:
            os.chown(scratch, uid, uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        layers["uid"] = uid
    else:
        layers["uid"] = f"off: running as uid {os.geteuid()}"
    # After the uid change, so the per-user process count applies to this worker's own uid.
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    layers["rlimits"]["nproc"] = nproc
    _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    layers["scratch"] = scratch or "off"
    return layers


class PidNamespaces:
    """Forks each worker as pid 1 of a PID namespace of its own (in the zygote).

    `unshare(CLONE_NEWPID)` moves only the caller's future children, and a second unshare is refused
    while the first one's namespace is pending; so the zygote joins its own namespace again after
    each fork (`setns`), ready for the next. Whether the host allows it is tried once at start, in a
    throwaway child that also mounts its /proc: a host that refuses either gets workers without the
    layer (recorded as off in every grade), never workers that cannot start.
    """

    def __init__(self) -> None:
        self.own = None
        self.off = ""
        try:
            self.own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            pid = self._fork()
            if pid == 0:  # the probe: pid 1 of a new namespace that can mount its own /proc
                ok = os.getpid() == 1 and _libc.unshare(CLONE_NEWNS) == 0 \
                    and _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0 \
                    and _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) == 0
                os._exit(0 if ok else 1)
            _, status = os.waitpid(pid, 0)
            if status != 0:
                raise OSError(0, "a child in a new PID namespace could not mount its own /proc")
        except OSError as e:
            self.off = f"off: {e.strerror or e}"
            if self.own is not None:
                os.close(self.own)
                self.own = None

    def fork(self) -> int:
        """os.fork, the child in a fresh PID namespace where the host allows it."""
        return self._fork() if self.own is not None else os.fork()

    def _fork(self) -> int:
        _check(_libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
        try:
            pid = os.fork()
        except BaseException:
            _libc.setns(self.own, CLONE_NEWPID)
            raise
        if pid == 0:
            os.close(self.own)
            return 0
        # The zygote's next child must be free to get a new namespace of its own too.
        _check(_libc.setns(self.own, CLONE_NEWPID), "setns back to the zygote's PID namespace")
        return pid


def _mapped_mb() -> int:
    """This process's virtual size in MiB (the zygote's imports, thread arenas), from /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) // 1024 + 1
    except OSError:
        pass
    return 0


def _own_root(hide: list[str], reveal: list[str], tmp_mb: int, fresh_proc: bool) -> tuple[list[str], str]:
    """Build the worker's own root and pivot into it; returns the hidden directories and what became of
    the host's root. An OSError means the host refused a step before the pivot: what was built is gone
    again and nothing else changed, so the caller can hide in place instead."""
    if SYS_PIVOT_ROOT is None:
        raise OSError(errno.ENOSYS, f"no pivot_root system call number known for {platform.machine()}")
    hidden = [p for p in dict.fromkeys(hide) if p and os.path.isdir(p) and not os.path.islink(p)]
    new = STAGE + "/root"
    _private_tmpfs(STAGE, "size=64k,mode=0700", "a stage for the new root")
    try:
        os.mkdir(new)
        _root_tmpfs(new)
        _furnish(new, hidden, reveal, tmp_mb, fresh_proc)
        old_root = _pivot(new)
    except OSError:
        os.chdir("/")
        _libc.umount2(STAGE.encode(), MNT_DETACH)
        raise
    if fresh_proc:  # after the pivot: a proc file system shows the processes of the namespace that mounts it
        _no_way_back(_mount_proc, "/proc")
    return hidden, old_root


def probe_own_root(hide: list[str], reveal: list[str], tmp_mb: int) -> str:
    """Build a root of its own, pivot and mount /proc in a throwaway child, once per zygote: "" where the
    host allows every step, else "off: <why>". A step past the pivot that the host refuses would end
    every worker's start-up (there is no way back to hiding in place from there); after this probe such
    a host gets workers that hide in place, recorded as such, never workers that cannot start."""
    if os.geteuid() != 0:
        return "off: not root"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        why = ""
        try:
            os.close(r)
            _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
            _own_root(hide, reveal, tmp_mb, True)
            os.listdir("/")
        except BaseException as e:  # noqa: BLE001 - whatever it was, the parent hears it and the layer is off
            why = f"{type(e).__name__}: {e}"
        os.write(w, why.encode()[:1000])
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        why = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return f"off: a probe could not build a root of its own ({why})" if why else ""


def _no_way_back(step, *args) -> None:
    """A step after which the worker cannot hide in place any more (it is past the pivot, or half-way
    back from one): its failure is no OSError, which would send the caller there, but ends the worker's
    start-up with the host's reason."""
    try:
        step(*args)
    except OSError as e:
        raise RuntimeError(f"in the worker's own root: {e}") from e


def _root_tmpfs(path: str) -> None:
    """The tmpfs that becomes the worker's /, with the mode and owner of the host's /."""
    st = os.stat("/")
    _private_tmpfs(path, f"{ROOT_TMPFS},mode={stat.S_IMODE(st.st_mode):o}", "the new root")
    if (st.st_uid, st.st_gid) != (0, 0):
        os.chown(path, st.st_uid, st.st_gid)


def _furnish(new: str, hidden: list[str], reveal: list[str], tmp_mb: int, fresh_proc: bool) -> None:
    """Every top-level entry of the host's / as a worker sees it, under `new`: a fresh /tmp and /dev/shm,
    and an empty /proc where the namespace's own is mounted after the pivot (else the host's, bound)."""
    builder = _RootBuilder(new, hidden, reveal)
    fresh = ("tmp", "proc") if fresh_proc else ("tmp",)
    for name in sorted(os.listdir("/")):
        if name not in fresh:
            builder.place("/" + name)
    for name in fresh:  # mount points only: what is mounted on them shows its own mode
        os.mkdir(f"{new}/{name}")
    _fresh_scratch_mounts(new, tmp_mb)


class _RootBuilder:
    """Recreates under `new`, at the same paths, what a worker may see of the host's file system."""

    def __init__(self, new: str, hidden: list[str], reveal: list[str]) -> None:
        self.new = new
        self.hidden = {os.path.normpath(p) for p in hidden} | {os.path.realpath(p) for p in hidden}
        self.reveal = [os.path.normpath(r) for r in reveal if r and os.path.isdir(r)]

    def place(self, src: str) -> None:
        """`src` as a worker sees it: a symlink as itself; a hidden directory empty but for the revealed
        paths inside it; a directory holding hidden paths as a copy whose entries are placed one by one;
        anything else bound with everything mounted below it."""
        dst = self.new + src
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif src in self.hidden:
            self._hidden_dir(src, dst)
        elif os.path.isdir(src) and any(h.startswith(src + "/") for h in self.hidden):
            self._mirror(src, dst)
        else:
            self._bind(src, dst)

    def _hidden_dir(self, src: str, dst: str) -> None:
        """An empty, read-only directory, as the tmpfs that covered it did; a revealed path inside it gets
        its parents (created as `os.makedirs` does) and is placed itself."""
        inner = [r for r in self.reveal if r.startswith(src + "/")]
        inner = [r for r in inner if not any(r.startswith(q + "/") for q in inner)]
        os.mkdir(dst)
        os.chmod(dst, 0o755 if inner else 0o555)
        for r in inner:
            os.makedirs(os.path.dirname(self.new + r), exist_ok=True)
            self.place(r)

    def _mirror(self, src: str, dst: str) -> None:
        st = os.lstat(src)
        os.mkdir(dst)
        os.chmod(dst, stat.S_IMODE(st.st_mode))
        os.chown(dst, st.st_uid, st.st_gid)
        for name in sorted(os.listdir(src)):
            self.place(os.path.join(src, name))

    @staticmethod
    def _bind(src: str, dst: str) -> None:
        if os.path.isdir(src):
            os.mkdir(dst)
        else:  # a file, socket or device node: bound onto an empty file
            os.close(os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        _check(_libc.mount(src.encode(), dst.encode(), None, MS_BIND | MS_REC, None), f"bind {src}")


def _pivot(new: str) -> str:
    """Make `new` the root and detach the old one; returns what became of the host's root.

    pivot_root needs the current root to be a mount with a parent. A host whose root mount has none
    (gVisor's: it is its mount namespace's first mount) refuses with EINVAL; then the stage, a tmpfs
    mounted on the host's root, becomes the root first (chroot) and is the old root that is detached.
    The host's root stays mounted then, as the parent of the new root, where no path and no line of
    mountinfo reaches it."""
    try:
        _pivot_into(new)
        return "detached"
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        refused = e
    host = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.chroot(STAGE)
        try:
            _pivot_into("/" + os.path.basename(new))
        except OSError:
            _no_way_back(_return_to, host)  # the host's root again, so the caller can hide in place
            raise
    finally:
        os.close(host)
    return f"the unreachable parent of the new root (pivot_root from the host's root: {refused.strerror})"


def _pivot_into(new: str) -> None:
    """pivot_root(".", ".") from inside `new`: the old root ends up on top of the new one, then is
    detached with everything mounted below it (pivot_root(2) documents the idiom)."""
    os.chdir(new)
    _check(_libc.syscall(ctypes.c_long(SYS_PIVOT_ROOT), b".", b"."), f"pivot_root into {new}")
    _no_way_back(_detach, ".")
    os.chdir("/")


def _detach(path: str) -> None:
    _check(_libc.umount2(path.encode(), MNT_DETACH), "detach the old root")


def _return_to(root_fd: int) -> None:
    os.fchdir(root_fd)
    os.chroot(".")


def _cover(nodes: list[str]) -> list[str]:
    """Bind /dev/null over each device node, in this mount namespace only (its mounts are private): opening one
    opens nothing, and a driver's first call there fails. Returns the nodes covered, and "off: <node> (<why>)" for
    one the host refused; a node that is not there is skipped."""
    covered = []
    for node in dict.fromkeys(nodes):
        if not os.path.exists(node) or os.path.isdir(node):
            continue
        if _libc.mount(b"/dev/null", node.encode(), None, MS_BIND, None) == 0:
            covered.append(node)
        else:
            covered.append(f"off: {node} ({os.strerror(ctypes.get_errno())})")
    return covered


def _hide_in_place(hide: list[str], reveal: list[str], tmp_mb: int, fresh_proc: bool) -> list[str]:
    """Where the host refuses a root of the worker's own: a fresh /tmp, /dev/shm and /proc mounted over
    the host's, and each hidden directory covered by an empty tmpfs (which mountinfo names)."""
    _fresh_scratch_mounts("", tmp_mb)
    if fresh_proc:
        _mount_proc("/proc")
    return _hide(hide, reveal)


def _fresh_scratch_mounts(root: str, tmp_mb: int) -> None:
    """A fresh /tmp and /dev/shm under `root`: no file and no shared memory passes between attempts."""
    _private_tmpfs(root + "/tmp", f"size={tmp_mb}m,mode=1777", "private /tmp")
    if os.path.isdir(root + "/dev/shm"):
        _private_tmpfs(root + "/dev/shm", "size=256m,mode=1777", "private /dev/shm")


def _private_tmpfs(path: str, options: str, what: str) -> None:
    _check(_libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()), what)


def _mount_proc(path: str) -> None:
    _check(_libc.mount(b"proc", path.encode(), b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None), "private /proc")


def _hide(hide: list[str], reveal: list[str]) -> list[str]:
    """Cover each hidden directory with an empty tmpfs, re-binding revealed paths inside it."""
    hidden = []
    for n, path in enumerate(p for p in hide if p and os.path.isdir(p) and not os.path.islink(p)):
        inner = [r for r in reveal if r.startswith(path.rstrip("/") + "/")]
        parked = []
        for i, r in enumerate(inner):  # park the revealed trees before the cover goes on
            spot = f"/tmp/.reveal-{n}-{i}"
            os.makedirs(spot)
            _check(_libc.mount(r.encode(), spot.encode(), None, MS_BIND | MS_REC, None), f"park {r}")
            parked.append((spot, r))
        _private_tmpfs(path, f"size=64k,mode={'0755' if inner else '0555'}", f"hide {path}")
        for spot, r in parked:
            os.makedirs(r, exist_ok=True)
            _check(_libc.mount(spot.encode(), r.encode(), None, MS_BIND | MS_REC, None), f"reveal {r}")
            _libc.umount2(spot.encode(), MNT_DETACH)
            os.rmdir(spot)
        hidden.append(path)
    return hidden


def stat_fields(path: str) -> list[str]:
    """The fields of a /proc `stat` file (a process's or a thread's) after its command name, which may hold anything,
    spaces and parentheses included: the list starts at the state (the file's field 3, so field k is [k - 3]).
    Raises OSError when it cannot be read and IndexError when it has no name."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def uid_pids(uid: int) -> list[int]:
    """Every live process owned by uid."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    if stat_fields(f"/proc/{entry}/stat")[0] != "Z":
                        out.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
    return out


def kill_uid(uid: int) -> int:
    """Kill every process owned by `uid` (a worker's daemons and forks); returns how many."""
    n = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == uid:
                os.kill(int(entry), 9)
                n += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return n


def thread_ids(pid: int) -> set[str]:
    """The ids of process `pid`'s threads now, read from /proc (empty once it has ended)."""
    try:
        return set(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return set()


def thread_count(pid: int) -> int:
    return len(thread_ids(pid))


def child_pids(pid: int) -> list[int]:
    """Live direct children of pid, read from /proc (outside the candidate's reach)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = stat_fields(f"/proc/{entry}/stat")
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
            continue
    return kids


def fd_target(pid: int, fd: int) -> str | None:
    """What descriptor fd of pid refers to ("socket:[123]"), None when it is closed or unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def fd_size(pid: int, fd: int) -> int:
    """Bytes in the regular file that descriptor fd of pid writes to (0 for anything else or closed)."""
    try:
        st = os.stat(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0
