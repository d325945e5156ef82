"""A cache of compiled torch C++/CUDA extensions that one attempt cannot poison for another.

Why: a CUDA candidate compiles its extension (torch.utils.cpp_extension.load_inline / load) at
import time inside its worker, 30-60 s each, and every pass (primary, revalidation, a regrade
after a grader bump) compiles the same sources again.

Who owns what. The cache lives in the sealed parent, in a 0700 directory that `sealed_paths`
hides from every worker (workers cannot read it, let alone write it). A worker never sees an
entry: the parent sends it a *copy* of the entries it may use (`offer`, bytes through the wire)
and receives its build outputs (`accept`). The worker side (`ExtensionHook`) only wraps the two
loader functions; it is untrusted code's neighbour and is treated as such.

Why one attempt cannot poison another. The key of an entry is
    sha256(format, sha256(module source the parent sent), build env, sha256(extension material))
where the module source is the exact Python text the parent handed to the worker (the parent
hashes it itself), the build env (torch and CUDA versions, device capability, compiler, arch
list) is read by the parent, and the material is the full extension sources plus every build
flag (`material_of`). The worker can lie about the material and about the bytes, but the parent
files whatever it reports under the binding of *that attempt's own module source*: the only
program that can ever be served a lied-about entry is the same program, which could have built
the same bytes itself. Sharing across different programs with identical extension code would
need a trusted build (a fresh sandboxed builder given only the material); not done here.
Entries are checked on every use: an HMAC (key from a parent-only secret file) over the manifest
binds the entry to its key and its bytes' sha256, so an entry copied under another key, edited,
or corrupted on disk is deleted and the attempt compiles again; nothing unverified is served.

A build that failed with the compiler's own verdict is kept too, as a failure entry under the same kind of key
(`conclusive_failure`): the next load of the same material by the same program raises that verdict again instead
of compiling for a minute (grader.buildahead builds attempts ahead of their grades, and seven of twelve CUDA-L1
builds fail). The same argument holds: a program that lies about its own failure can only floor itself.

Standard library and torch only (torch imported lazily): this runs on the bare GPU workers.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import inspect
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

CACHE_FORMAT = "kerneltraj-ext-cache/1"
MAX_ENTRY_BYTES = 256 << 20
"""Largest extension binary accepted from a worker."""
DEFAULT_MAX_BYTES = 8 << 30
"""Cache size at which the oldest entries are evicted."""
_MODULE_FILE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,120}\.so$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
FAILURE_FILE = "failure.txt"
"""The file of a failure entry: what the compiler said (`_build_error`'s summary)."""
MAX_FAILURE_BYTES = 4096
_NOT_MATERIAL = {"verbose", "build_directory"}
"""load/load_inline arguments that do not change what is built (where and how loudly)."""


@dataclass(frozen=True)
class BuildEnv:
    """What besides the sources decides the bytes of a build; read by the parent, never the worker."""

    torch_version: str
    """torch.__version__."""
    cuda_version: str | None
    """torch.version.cuda (None on CPU-only builds)."""
    capability: str
    """`sm_90` for the grading device, `cpu` for CPU graders."""
    toolchain: str
    """First line of `c++ --version`, last line of `nvcc --version`, TORCH_CUDA_ARCH_LIST, CXX."""

    @staticmethod
    def local(device: str) -> "BuildEnv":
        import torch

        cap = "cpu"
        if device.startswith("cuda"):
            major, minor = torch.cuda.get_device_capability(torch.device(device))
            cap = f"sm_{major}{minor}"
        return BuildEnv(torch.__version__, torch.version.cuda, cap, _toolchain())


@functools.cache
def _toolchain() -> str:
    def first(cmd: list[str], last: bool = False) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            return "absent"
        return (out[-1] if last else out[0]) if out else "absent"

    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    return " | ".join([first([os.environ.get("CXX", "c++"), "--version"]),
                       first([nvcc, "--version"], last=True) if os.path.exists(nvcc) else "no nvcc",
                       f"arch={os.environ.get('TORCH_CUDA_ARCH_LIST', '')}", f"cxx={os.environ.get('CXX', '')}"])


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def material_of(api: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """The full build material of one loader call (sources and every flag), or None when the call
    cannot be cached (not a Python module, standalone executables, unreadable source files)."""
    if not arguments.get("is_python_module", True) or arguments.get("is_standalone", False):
        return None
    out: dict[str, Any] = {"api": api}
    for k, v in arguments.items():
        if k in _NOT_MATERIAL or k == "sources":
            continue
        if isinstance(v, str) and k in ("cpp_sources", "cuda_sources", "sycl_sources"):
            v = [v]  # torch accepts one string or a list of them: same build
        try:
            # A copy, never the caller's object: torch's loaders extend the lists they are given in place
            # (`_prepare_ldflags` appends its own flags to `extra_ldflags`), so a material holding the caller's
            # list was filed under other flags than a later call's lookup finds (H100 run 125: CUDA-L1 L1:T3
            # looked up 261890d7, its failure was filed as a3176311, and it compiled again in its slot).
            out[k] = json.loads(_canonical(v))
        except (TypeError, ValueError):
            return None
    if api == "load":  # files: their bytes are the material, not their (scratch) paths
        files = []
        for p in [arguments["sources"]] if isinstance(arguments["sources"], str) else arguments["sources"]:
            try:
                files.append([os.path.basename(p), sha256_hex(Path(p).read_bytes())])
            except OSError:
                return None
        out["sources"] = files
    return out


MAX_SUMMARIES = 3
"""The most builds a record summarises (`material_summary`)."""


def material_summary(material: dict[str, Any]) -> dict[str, str]:
    """Each argument of a build's material by the first 8 hex digits of its sha256, the whole material's under "*":
    two builds of one program that should have been one entry show which argument told them apart."""
    return {"*": sha256_hex(_canonical(material))[:8],
            **{str(k): sha256_hex(_canonical(v))[:8] for k, v in sorted(material.items())}}


def summaries(value: Any) -> list[dict[str, str]]:
    """`material_summary`s a worker or builder reported, kept only as such (it is untrusted: plain short strings,
    a few of them)."""
    if not isinstance(value, list):
        return []
    return [{k: v for k, v in d.items() if isinstance(k, str) and len(k) <= 40 and isinstance(v, str)
             and len(v) == 8}
            for d in value[:MAX_SUMMARIES] if isinstance(d, dict) and len(d) <= 40]


def binding(module_source: str, env: BuildEnv) -> str:
    """The part of every key that ties an entry to one exact program and one build environment."""
    return sha256_hex(_canonical({"format": CACHE_FORMAT, "module": sha256_hex(module_source), "env": asdict(env)}))


def cache_key(bind: str, material_sha256: str) -> str:
    return sha256_hex(f"{CACHE_FORMAT}\n{bind}\n{material_sha256}")


# ---- frames of (meta, bytes) pairs, so entries travel as one wire payload -----------------------

def pack(items: list[tuple[dict[str, Any], bytes]]) -> tuple[list[dict[str, Any]], bytes]:
    index, chunks, offset = [], [], 0
    for meta, data in items:
        index.append({**meta, "offset": offset, "size": len(data)})
        chunks.append(data)
        offset += len(data)
    return index, b"".join(chunks)


def unpack(index: list[dict[str, Any]], payload: bytes) -> list[tuple[dict[str, Any], bytes]]:
    """Inverse of `pack`; items whose bounds do not fit the payload are dropped (a lying peer)."""
    out = []
    for meta in index if isinstance(index, list) else []:
        if not isinstance(meta, dict):
            continue
        off, size = meta.get("offset"), meta.get("size")
        if type(off) is int and type(size) is int and off >= 0 and 0 < size <= MAX_ENTRY_BYTES \
                and off + size <= len(payload):
            out.append((meta, payload[off:off + size]))
    return out


# ---- the parent's side ------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One verified cache entry."""

    key: str
    """cache_key(binding, material_sha256)."""
    material_sha256: str
    """sha256 of the canonical build material, recomputed by the parent from the material itself."""
    module_file: str
    """File name of the extension binary (`<module name>.so`), or `FAILURE_FILE` for a failure entry."""
    path: Path
    """Directory of the entry."""

    @property
    def failure(self) -> bool:
        return self.module_file == FAILURE_FILE


class CompileCache:
    """Content-addressed extension binaries owned by the sealed parent (see the module docstring)."""

    def __init__(self, root: str | Path, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        # The default root sits in a shared /tmp: a directory someone else made there first (and
        # whose secret they know) would let them plant entries, so only our own one is used.
        if os.stat(self.root).st_uid != os.geteuid():
            raise PermissionError(f"compile cache {self.root} is owned by another user")
        os.chmod(self.root, 0o700)
        secret = self.root / ".secret"
        if not secret.exists():
            tmp = self.root / f".secret.{secrets.token_hex(8)}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            os.write(fd, secrets.token_bytes(32))
            os.close(fd)
            try:
                os.link(tmp, secret)  # first writer wins; a concurrent one reads the winner's secret
            except FileExistsError:
                pass
            os.unlink(tmp)
        self._secret = secret.read_bytes()

    def _mac(self, manifest: dict[str, Any]) -> str:
        return hmac.new(self._secret, _canonical(manifest), hashlib.sha256).hexdigest()

    def _discard(self, path: Path) -> None:
        trash = self.root / f".trash-{secrets.token_hex(8)}"
        try:
            os.rename(path, trash)
        except OSError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def lookup(self, bind: str, material_sha256: str) -> Entry | None:
        """The entry for this key if it verifies; a present entry that does not verify is deleted."""
        if not (_HEX64.match(bind) and _HEX64.match(material_sha256)):
            return None
        path = self.root / bind / material_sha256
        if not path.is_dir():
            return None
        key = cache_key(bind, material_sha256)
        try:
            doc = json.loads((path / "manifest.json").read_bytes())
            m = doc["manifest"]
            ok = (hmac.compare_digest(str(doc["mac"]), self._mac(m)) and m["format"] == CACHE_FORMAT
                  and m["key"] == key and m["binding"] == bind and m["material_sha256"] == material_sha256
                  and (_MODULE_FILE.match(m["module_file"]) or m["module_file"] == FAILURE_FILE)
                  and sha256_hex((path / m["module_file"]).read_bytes()) == m["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            self._discard(path)
            return None
        return Entry(key, material_sha256, m["module_file"], path)

    def store(self, bind: str, material: dict[str, Any], module_file: str, data: bytes) -> Entry | None:
        """File a build (or, as `FAILURE_FILE`, a conclusive failure's text) under (binding, sha256 of `material`);
        None when refused. Atomic: a reader sees the whole entry or none, and a concurrent store of the same key
        keeps the first."""
        failure = module_file == FAILURE_FILE
        if not _HEX64.match(bind) or not (failure or _MODULE_FILE.match(module_file)) \
                or not 0 < len(data) <= (MAX_FAILURE_BYTES if failure else MAX_ENTRY_BYTES) \
                or (failure and not conclusive_failure(data.decode("utf-8", "replace"))):
            return None
        mat = _canonical(material)
        msha = sha256_hex(mat)
        manifest = {"format": CACHE_FORMAT, "key": cache_key(bind, msha), "binding": bind, "material_sha256": msha,
                    "module_file": module_file, "sha256": sha256_hex(data), "size": len(data), "created": time.time()}
        tmp = self.root / f".tmp-{secrets.token_hex(8)}"
        tmp.mkdir(mode=0o700)
        (tmp / module_file).write_bytes(data)
        (tmp / "material.json").write_bytes(mat)
        (tmp / "manifest.json").write_bytes(_canonical({"manifest": manifest, "mac": self._mac(manifest)}))
        (self.root / bind).mkdir(mode=0o700, exist_ok=True)
        try:
            os.rename(tmp, self.root / bind / msha)
        except OSError:  # already there (a concurrent store): keep it, it is verified on use
            shutil.rmtree(tmp, ignore_errors=True)
        self._evict()
        return self.lookup(bind, msha)

    def entries(self, bind: str) -> list[Entry]:
        folder = self.root / bind
        names = sorted(os.listdir(folder)) if _HEX64.match(bind) and folder.is_dir() else []
        return [e for e in (self.lookup(bind, n) for n in names) if e is not None]

    def offer(self, module_source: str, env: BuildEnv) -> tuple[list[dict[str, Any]], bytes]:
        """Copies of every verified entry this exact program may use (builds and failures), packed for the wire."""
        items = [({"material_sha256": e.material_sha256, "module_file": e.module_file},
                  (e.path / e.module_file).read_bytes()) for e in self.entries(binding(module_source, env))]
        return pack(items)

    def accept(self, module_source: str, env: BuildEnv, index: list[dict[str, Any]], payload: bytes) -> list[Entry]:
        """File a worker's reported builds and conclusive failures under the binding of the program the parent sent
        it.

        Digests the worker states are ignored: the parent recomputes the material's sha256."""
        bind = binding(module_source, env)
        out = []
        for meta, data in unpack(index, payload):
            material, module_file = meta.get("material"), meta.get("module_file")
            if isinstance(material, dict) and isinstance(module_file, str):
                e = self.store(bind, material, module_file, data)
                if e is not None:
                    out.append(e)
        return out

    def _evict(self) -> None:
        entries = []
        for manifest in self.root.glob("*/*/manifest.json"):
            try:
                st = manifest.stat()
                size = sum(f.stat().st_size for f in manifest.parent.iterdir())
            except OSError:
                continue
            entries.append((st.st_mtime, size, manifest.parent))
        total = sum(s for _, s, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            self._discard(path)
            total -= size


def sealed_from(layers: dict[str, Any], cache_root: str | Path) -> bool:
    """Whether a worker that entered these sandbox layers (its hello, sent before any candidate
    code ran) can neither read nor write the cache: it runs as another uid (the root is 0700), or
    the root is covered in its mount namespace. Without either, offer and accept nothing."""
    root = os.path.realpath(cache_root)
    other_uid = type(layers.get("uid")) is int and layers["uid"] != os.geteuid()
    covered = [os.path.realpath(h) for h in layers.get("hidden_paths") or [] if isinstance(h, str)]
    if layers.get("mount_ns") is True:
        covered.append("/tmp")  # a fresh tmpfs in the worker
    return other_uid or any(root == c or root.startswith(c.rstrip("/") + "/") for c in covered)


# ---- the worker's side --------------------------------------------------------------------------

class ExtensionHook:
    """Wraps torch's extension loaders in the worker: serves offered binaries, records new builds.

    Install it before the candidate's module is imported (the candidate binds the loader names
    when it imports them)."""

    def __init__(self, scratch: str | Path, offered_index: list[dict[str, Any]] = (), offered_payload: bytes = b""):
        self.scratch = Path(scratch)
        offered = [(m, data) for m, data in unpack(list(offered_index), offered_payload)
                   if _HEX64.match(str(m.get("material_sha256")))]
        self.offered = {m["material_sha256"]: (m["module_file"], data) for m, data in offered
                        if _MODULE_FILE.match(str(m.get("module_file")))}
        self.offered_failures = {m["material_sha256"]: data.decode("utf-8", "replace") for m, data in offered
                                 if m.get("module_file") == FAILURE_FILE}
        """Material digests whose build failed before (ahead of this grade, or in an earlier one): the compiler's
        verdict, raised again instead of compiling."""
        self.built: list[tuple[dict[str, Any], str]] = []
        """(material, path of the built binary) of every build this worker ran."""
        self.served: list[str] = []
        """Material digests served from the offer instead of compiled."""
        self.replayed: list[str] = []
        """Material digests whose offered failure was raised again instead of compiling."""
        self.failures: list[tuple[dict[str, Any], str]] = []
        """(material, what the compiler said) of each build here that failed conclusively, for the parent."""
        self.failed: list[str] = []
        """The last lines of each build that raised (the candidate's code may catch it and fall back to the
        library, which the own-kernel rule then floors: the grade says why its kernel never ran)."""
        self.compiled: list[dict[str, str]] = []
        """What each build torch ran here was built from (`material_summary`): a later grade of the same program
        that compiles again instead of being served says, beside its build ahead's, which argument differed."""
        self._saved: dict[str, Callable] = {}

    def __enter__(self) -> "ExtensionHook":
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def install(self) -> None:
        from torch.utils import cpp_extension as ce

        for api in ("load_inline", "load"):
            orig = getattr(ce, api)
            self._saved[api] = orig
            setattr(ce, api, functools.wraps(orig)(functools.partial(self._call, api, orig)))

    def uninstall(self) -> None:
        from torch.utils import cpp_extension as ce

        for api, orig in self._saved.items():
            setattr(ce, api, orig)
        self._saved.clear()

    def _call(self, api: str, orig: Callable, *args: Any, **kwargs: Any) -> Any:
        try:
            bound = inspect.signature(orig).bind(*args, **kwargs)
        except TypeError:
            return orig(*args, **kwargs)  # let torch report the bad call
        bound.apply_defaults()
        material = material_of(api, dict(bound.arguments))
        if material is None:
            return orig(*args, **kwargs)
        digest = sha256_hex(_canonical(material))
        if digest in self.offered:
            module_file, data = self.offered[digest]
            folder = self.scratch / ".kt_ext" / digest[:16]
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / module_file
            path.write_bytes(data)
            self.served.append(digest)
            return _import_extension(path)
        if digest in self.offered_failures:
            text = self.offered_failures[digest]
            self.replayed.append(digest)
            self.failed.append(text)
            raise RuntimeError(f"Error building extension (the same sources failed to build before, ahead of this "
                               f"grade or in an earlier one): {text}")
        self.compiled.append(material_summary(material))
        try:
            mod = orig(*args, **kwargs)
        except BaseException as e:
            text = f"{type(e).__name__}: {e}"
            self.failed.append(_build_error(text))
            if conclusive_failure(text):
                self.failures.append((material, _build_error(text)))
            raise
        path = getattr(mod, "__file__", None)
        if isinstance(path, str) and _MODULE_FILE.match(os.path.basename(path)):
            self.built.append((material, path))
        return mod

    def report(self) -> tuple[list[dict[str, Any]], bytes]:
        """This worker's builds and conclusive failures, packed for the parent's `accept`."""
        items = []
        for material, path in self.built:
            try:
                items.append(({"material": material, "module_file": os.path.basename(path)}, Path(path).read_bytes()))
            except OSError:
                continue
        for material, text in self.failures:
            items.append(({"material": material, "module_file": FAILURE_FILE},
                          text.encode("utf-8", "replace")[:MAX_FAILURE_BYTES]))
        return pack(items)


_VERDICT = re.compile(r"(:\d+(:\d+)?: (fatal )?error|\(\d+\): (catastrophic )?error)( [A-Z]?\d+)?:")
"""A compiler's verdict on a line of a source: `main.cpp:77:1: error:` (gcc, clang), `cuda.cu(185): error:` (nvcc)."""
_NOT_THE_SOURCES = re.compile(r"killed|signal|out of memory|memory exhausted|cannot allocate|no space left|"
                              r"resource temporarily|timed? ?out|interrupt|permission denied|no such file",
                              re.IGNORECASE)


def conclusive_failure(text: str) -> bool:
    """Whether a failed build's output holds the compiler's verdict on a line of the sources (`_VERDICT`), and
    nothing that says the host failed it (killed, out of memory or disk, timed out, a missing tool): only such a
    failure is kept and raised again for the same material, since the same sources and flags fail the same way."""
    lines = [ln for ln in str(text).splitlines() if ln.strip()]
    return any(_VERDICT.search(ln) for ln in lines) and not any(_NOT_THE_SOURCES.search(ln) for ln in lines)


def _build_error(text: str, limit: int = 800) -> str:
    """What a failed build said: its first lines naming an error (the compiler's verdicts, which ninja prints
    before the failed command lines), then its last line; the whole tail where no line names one."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and not ln.startswith(("FAILED:", "/usr/", "c++ ", "nvcc "))]
    picked = errors[:4] + lines[-1:] if errors else lines[-6:]
    return " | ".join(ln if len(ln) <= 240 else ln[:120] + " ... " + ln[-100:] for ln in picked)[:limit]


def _import_extension(path: Path) -> Any:
    """Import a compiled extension module from a file (its name is the file's stem, as torch builds it)."""
    import importlib.machinery
    import importlib.util

    name = path.name[:-3]
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
