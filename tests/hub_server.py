"""A local stand-in for the Hugging Face Hub HTTP API, serving dataset repos from real git repositories.

It speaks the subset of the Hub API that `huggingface_hub.HfApi` (2.x), `snapshot_download`,
`HfFileSystem` and `datasets.load_dataset` use for a dataset repo, so the tests publish through
the real clients. It is a test double: it lives in tests/, never in the product. Each repo is a
bare git repository: every Hub commit is a git commit, every Hub tag a git tag, and file bodies are
read back with `git cat-file`. Large files may go through the git-LFS batch API (objects kept beside
the repos, pointers committed); the Xet protocol is not spoken, so no Xet header is ever sent and the
client downloads over plain HTTP.

Run standalone: `python -m tests.hub_server --port 0 --root DIR` (prints the URL it serves).
"""
from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import io
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import yaml


class ApiError(Exception):
    """An HTTP error answer: status, message and the Hub's X-Error-Code that the client maps to exceptions."""

    def __init__(self, status: int, message: str, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


@dataclass(frozen=True)
class RepoEntry:
    """One file or directory of a commit's tree, as the Hub describes it."""

    path: str
    """Path in the repo, `/`-separated."""
    type: str
    """`file` or `directory`."""
    oid: str
    """Git blob id (of the LFS pointer for LFS files) or tree id."""
    size: int
    """Content size in bytes (the real object's size for LFS files, 0 for directories)."""
    lfs_sha256: str | None = None
    """sha256 of the content when the file is stored through LFS."""
    pointer_size: int | None = None
    """Size of the committed LFS pointer, bytes."""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_LFS_POINTER = re.compile(rb"version https://git-lfs.github.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize (\d+)\n")
# A new Hub repo starts with this file; upload modes here are decided by size (lfs_threshold_bytes), not by it.
_GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in (
    "*.parquet", "*.arrow", "*.bin", "*.gz", "*.zst", "*.tar", "*.zip", "*.npy", "*.safetensors", "*.pt"))
_ZERO = "0" * 40
_DATE = "--date=format-local:%Y-%m-%dT%H:%M:%S.000Z"  # the Hub's date format, in UTC (TZ=UTC below)


def front_matter(text: str) -> dict[str, Any] | None:
    """The YAML block between leading `---` lines of a card, or None when there is none."""
    if not text.startswith("---"):
        return None
    lines = text.splitlines()
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        raise ValueError("README.md front matter opens with --- but never closes") from None
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as e:
        raise ValueError(f"README.md front matter is not valid YAML: {e}") from None
    if data is not None and not isinstance(data, dict):
        raise ValueError("README.md front matter must be a mapping")
    return data or {}


class GitRepoStore:
    """Dataset repos as bare git repositories under `root`, LFS objects beside them; thread-safe."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        (self.root / "datasets").mkdir(parents=True, exist_ok=True)
        self.lfs_dir = self.root / "lfs-objects"
        self.lfs_dir.mkdir(exist_ok=True)
        # no user or system git config may leak in (signing, hooks, templates); dates in UTC
        self._env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root), "TZ": "UTC",
                     "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_TERMINAL_PROMPT": "0",
                     "GIT_AUTHOR_NAME": "local-hub", "GIT_AUTHOR_EMAIL": "hub@localhost",
                     "GIT_COMMITTER_NAME": "local-hub", "GIT_COMMITTER_EMAIL": "hub@localhost"}
        self._locks: dict[str, threading.Lock] = {}
        self._global = threading.Lock()
        self._listings: dict[tuple[str, str], list[RepoEntry]] = {}

    # ---- repos and refs -------------------------------------------------------------------------
    def _dir(self, repo_id: str) -> Path:
        parts = repo_id.split("/")
        if len(parts) != 2 or not all(_NAME.fullmatch(p) for p in parts) or parts[1].endswith(".git") \
                or ".." in repo_id:
            raise ApiError(400, f"invalid repo id {repo_id!r}")
        return self.root / "datasets" / parts[0] / f"{parts[1]}.git"

    def _lock(self, repo_id: str) -> threading.Lock:
        with self._global:
            return self._locks.setdefault(repo_id, threading.Lock())

    def git(self, repo_id: str, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None,
            check: bool = True) -> bytes:
        proc = subprocess.run(["git", f"--git-dir={self._dir(repo_id)}", *args], input=stdin,
                              capture_output=True, env={**self._env, **(env or {})})
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout

    def meta(self, repo_id: str) -> dict[str, Any]:
        path = self._dir(repo_id) / "hub-meta.json"
        if not path.is_file():
            raise ApiError(404, f"Repository {repo_id} not found", code="RepoNotFound")
        return json.loads(path.read_text())

    def create(self, repo_id: str, *, private: bool) -> bool:
        """Create the repo with the Hub's initial commit (.gitattributes); False when it already exists."""
        d = self._dir(repo_id)
        with self._lock(repo_id):
            if (d / "hub-meta.json").is_file():
                return False
            d.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(d)],
                           check=True, capture_output=True, env=self._env)
            blob = self.git(repo_id, "hash-object", "-w", "--stdin", stdin=_GITATTRIBUTES.encode()).decode().strip()
            tree = self.git(repo_id, "mktree", stdin=f"100644 blob {blob}\t.gitattributes\n".encode()).decode().strip()
            sha = self.git(repo_id, "commit-tree", tree, "-m", "initial commit").decode().strip()
            self.git(repo_id, "update-ref", "refs/heads/main", sha, _ZERO)
            created = self.git(repo_id, "show", "-s", _DATE, "--format=%cd", sha).decode().strip()
            (d / "hub-meta.json").write_text(json.dumps({"private": private, "created_at": created}))
            return True

    def refs(self, repo_id: str) -> list[tuple[str, str]]:
        """(ref name, commit sha) pairs; annotated tags are peeled to their commit."""
        self.meta(repo_id)
        out = self.git(repo_id, "for-each-ref", "--format=%(refname)%00%(objectname)%00%(*objectname)")
        pairs = []
        for line in out.decode().splitlines():
            ref, obj, peeled = line.split("\0")
            pairs.append((ref, peeled or obj))
        return pairs

    def resolve(self, repo_id: str, rev: str, *, branch_only: bool = False) -> str:
        """Commit sha of a branch, tag, `refs/...` name or full commit id; 404 RevisionNotFound otherwise."""
        refs = dict(self.refs(repo_id))
        if branch_only:
            if f"refs/heads/{rev}" not in refs:
                raise ApiError(404 if not re.fullmatch(r"[0-9a-f]{40}", rev) and f"refs/tags/{rev}" not in refs
                               else 400, f"cannot commit to {rev!r}: not a branch of {repo_id}",
                               code="RevisionNotFound")
            return refs[f"refs/heads/{rev}"]
        for ref in (f"refs/heads/{rev}", f"refs/tags/{rev}", rev if rev.startswith("refs/") else None):
            if ref in refs:
                return refs[ref]
        if re.fullmatch(r"[0-9a-f]{40}", rev):
            kind = self.git(repo_id, "cat-file", "-t", rev, check=False).decode().strip()
            if kind == "commit":
                return rev
        raise ApiError(404, f"Invalid rev id: {rev}", code="RevisionNotFound")

    # ---- trees and files ------------------------------------------------------------------------
    def listing(self, repo_id: str, commit: str) -> list[RepoEntry]:
        """Every file and directory of `commit` (cached: a commit never changes)."""
        key = (repo_id, commit)
        if key in self._listings:
            return self._listings[key]
        raw = self.git(repo_id, "ls-tree", "-r", "-t", "-l", "-z", commit)
        records = []
        for rec in raw.decode("utf-8").split("\0"):
            if rec:
                meta, path = rec.split("\t", 1)
                mode, typ, oid, size = meta.split()
                records.append((path, typ, oid, 0 if size == "-" else int(size)))
        small = [oid for _, typ, oid, size in records if typ == "blob" and size < 200]
        pointers = {}
        if small:  # LFS pointers are tiny blobs: read them all in one git process
            out = self.git(repo_id, "cat-file", "--batch", stdin="".join(f"{o}\n" for o in small).encode())
            pos = 0
            for oid in small:
                header_end = out.index(b"\n", pos)
                size = int(out[pos:header_end].split()[2])
                body = out[header_end + 1:header_end + 1 + size]
                pos = header_end + 1 + size + 1
                m = _LFS_POINTER.fullmatch(body)
                if m:
                    pointers[oid] = (m.group(1).decode(), int(m.group(2)), size)
        entries = []
        for path, typ, oid, size in records:
            if typ == "tree":
                entries.append(RepoEntry(path, "directory", oid, 0))
            elif oid in pointers:
                sha, real, ptr = pointers[oid]
                entries.append(RepoEntry(path, "file", oid, real, sha, ptr))
            else:
                entries.append(RepoEntry(path, "file", oid, size))
        if len(self._listings) > 512:
            self._listings.clear()
        self._listings[key] = entries
        return entries

    def read(self, repo_id: str, entry: RepoEntry) -> bytes:
        if entry.lfs_sha256:
            path = self._lfs_path(entry.lfs_sha256)
            if not path.is_file():
                raise ApiError(500, f"LFS object {entry.lfs_sha256} missing from the store")
            return path.read_bytes()
        return self.git(repo_id, "cat-file", "blob", entry.oid)

    def commit_info(self, repo_id: str, commit: str) -> dict[str, str]:
        return {"date": self.git(repo_id, "show", "-s", _DATE, "--format=%cd", commit).decode().strip()}

    def log(self, repo_id: str, commit: str) -> list[dict[str, Any]]:
        out = self.git(repo_id, "log", _DATE, "--format=%H%x1f%s%x1f%B%x1f%an%x1f%cd%x1e", commit).decode()
        items = []
        for rec in out.split("\x1e"):
            if rec.strip():
                sha, title, body, author, date = rec.strip("\n").split("\x1f")
                items.append({"id": sha, "title": title, "message": body.strip(), "date": date,
                              "authors": [{"user": author}]})
        return items

    def last_commit(self, repo_id: str, commit: str, path: str) -> dict[str, str]:
        out = self.git(repo_id, "log", "-1", _DATE, "--format=%H%x1f%s%x1f%cd", commit, "--", path).decode().strip()
        sha, title, date = out.split("\x1f")
        return {"id": sha, "title": title, "date": date}

    @staticmethod
    def check_path(path: str) -> str:
        parts = path.split("/")
        if (not path or len(path) > 1000 or any(p in ("", ".", "..", ".git") for p in parts)
                or any(ord(c) < 32 for c in path) or "\\" in path):
            raise ApiError(400, f"invalid path in repo: {path!r}")
        return path

    # ---- writes ---------------------------------------------------------------------------------
    def commit(self, repo_id: str, branch: str, ops: list[tuple[str, str, Any]], message: str,
               parent: str | None) -> str:
        """Apply file/lfs/delete operations on top of `branch` as one git commit; returns its sha."""
        with self._lock(repo_id):
            head = self.resolve(repo_id, branch, branch_only=True)
            if parent is not None and parent != head:
                raise ApiError(412, f"A commit has happened since {parent}: {branch} is now at {head}. "
                                    "Refresh and try again.")
            files = {e.path for e in self.listing(repo_id, head) if e.type == "file"}
            index_lines = []
            for kind, path, payload in ops:
                path = self.check_path(path)
                if kind in ("file", "lfs"):
                    if kind == "lfs":
                        oid, size = payload
                        if not self.has_lfs(oid, size):
                            raise ApiError(400, f"{path}: LFS object {oid} was never uploaded (or has another "
                                                "size); upload it through the LFS batch API first")
                        size = self._lfs_path(oid).stat().st_size
                        payload = f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n"
                        payload = payload.encode()
                    blob = self.git(repo_id, "hash-object", "-w", "--stdin", stdin=payload).decode().strip()
                    index_lines.append(f"100644 {blob}\t{path}")
                    files.add(path)
                elif kind == "deletedFile":
                    if path not in files:
                        raise ApiError(404, f"A file with this name doesn't exist: {path}", code="EntryNotFound")
                    index_lines.append(f"0 {_ZERO}\t{path}")
                    files.discard(path)
                else:
                    victims = [f for f in files if f.startswith(path.rstrip("/") + "/")]
                    if not victims:
                        raise ApiError(404, f"A folder with this name doesn't exist: {path}", code="EntryNotFound")
                    index_lines += [f"0 {_ZERO}\t{v}" for v in victims]
                    files.difference_update(victims)
            for f in files:  # a path may not be both a file and a folder
                parents = f.split("/")[:-1]
                if any("/".join(parents[:i]) in files for i in range(1, len(parents) + 1)):
                    raise ApiError(400, f"{f}: a parent folder of this path is a file")
            with tempfile.TemporaryDirectory() as tmp:
                env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
                self.git(repo_id, "read-tree", head, env=env)
                self.git(repo_id, "update-index", "--index-info", stdin=("\n".join(index_lines) + "\n").encode(),
                         env=env)
                tree = self.git(repo_id, "write-tree", env=env).decode().strip()
            sha = self.git(repo_id, "commit-tree", tree, "-p", head, "-F", "-", stdin=message.encode()).decode().strip()
            self.git(repo_id, "update-ref", f"refs/heads/{branch}", sha, head)
            return sha

    def tag(self, repo_id: str, tag: str, rev: str, message: str | None) -> str:
        valid = subprocess.run(["git", "check-ref-format", f"refs/tags/{tag}"], env=self._env).returncode == 0
        if not valid or tag.startswith("-"):
            raise ApiError(400, f"invalid tag name {tag!r}")
        with self._lock(repo_id):
            sha = self.resolve(repo_id, rev)
            if f"refs/tags/{tag}" in dict(self.refs(repo_id)):
                raise ApiError(409, f"Tag {tag} already exists")
            args = ["tag", "-a", "-m", message, tag, sha] if message else ["tag", tag, sha]
            self.git(repo_id, *args)
            return sha

    def delete_tag(self, repo_id: str, tag: str) -> None:
        with self._lock(repo_id):
            if f"refs/tags/{tag}" not in dict(self.refs(repo_id)):
                raise ApiError(404, f"Tag {tag} not found", code="RevisionNotFound")
            self.git(repo_id, "tag", "-d", tag)

    # ---- LFS objects ----------------------------------------------------------------------------
    def _lfs_path(self, oid: str) -> Path:
        return self.lfs_dir / oid[:2] / oid[2:4] / oid

    def has_lfs(self, oid: str, size: int | None) -> bool:
        if not re.fullmatch(r"[0-9a-f]{64}", oid):
            return False
        p = self._lfs_path(oid)
        return p.is_file() and (size is None or p.stat().st_size == size)

    def put_lfs(self, oid: str, size: int, body: bytes) -> None:
        if len(body) != size or hashlib.sha256(body).hexdigest() != oid:
            raise ApiError(400, f"uploaded body does not match oid {oid} and size {size}")
        p = self._lfs_path(oid)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".{secrets.token_hex(4)}.tmp")
        tmp.write_bytes(body)
        os.replace(tmp, p)


_PLACEHOLDERS = {"{repo}": r"(?P<ns>[^/?]+)/(?P<name>[^/?]+?)", "{rev}": r"(?P<rev>[^/?]+)",
                 "{tag}": r"(?P<rev>[^/?]+)", "{path}": r"(?P<path>.+)", "{oid}": r"(?P<oid>[0-9a-f]{64})"}


def _route(method: str, template: str, handler: str) -> tuple[str, str, re.Pattern[str], str]:
    pattern = re.escape(template)
    for placeholder, rx in _PLACEHOLDERS.items():
        pattern = pattern.replace(re.escape(placeholder), rx)
    return method, template, re.compile(f"^{pattern}$"), handler


# (method, route template: also the name in the request log, path regex, handler h_<name>)
_ROUTES = [_route(*r) for r in [
    ("GET", "/api/whoami-v2", "whoami"),
    ("POST", "/api/repos/create", "create_repo"),
    ("POST", "/api/validate-yaml", "validate_yaml"),
    ("GET", "/api/datasets/{repo}", "repo_info"),
    ("GET", "/api/datasets/{repo}/revision/{rev}", "repo_info"),
    ("POST", "/api/datasets/{repo}/preupload/{rev}", "preupload"),
    ("POST", "/api/datasets/{repo}/commit/{rev}", "commit"),
    ("POST", "/api/datasets/{repo}/tag/{rev}", "create_tag"),
    ("DELETE", "/api/datasets/{repo}/tag/{tag}", "delete_tag"),
    ("GET", "/api/datasets/{repo}/refs", "refs"),
    ("GET", "/api/datasets/{repo}/commits/{rev}", "commits"),
    ("GET", "/api/datasets/{repo}/tree/{rev}", "tree"),
    ("GET", "/api/datasets/{repo}/tree/{rev}/{path}", "tree"),
    ("POST", "/api/datasets/{repo}/paths-info/{rev}", "paths_info"),
    ("GET", "/datasets/{repo}/resolve/{rev}/{path}", "resolve"),
    ("HEAD", "/datasets/{repo}/resolve/{rev}/{path}", "resolve"),
    ("POST", "/datasets/{repo}.git/info/lfs/objects/batch", "lfs_batch"),
    ("POST", "/datasets/{repo}.git/info/lfs/objects/verify", "lfs_verify"),
    ("PUT", "/lfs-upload/{repo}/{oid}", "lfs_put"),  # the signed upload URL handed out by lfs_batch
]]
_WRITE_HANDLERS = {"create_repo", "preupload", "commit", "create_tag", "delete_tag", "lfs_batch", "lfs_verify"}
UNROUTED = "<unrouted>"
"""Route name logged for a request that matched no implemented endpoint (answered 404)."""
LOST_ANSWER = 0
"""Fault code for `LocalHub.fail_next`: the request is applied but the connection closes unanswered."""
_MAX_BODY_BYTES = 1 << 30
_TREE_PAGE = 1000
_TREE_PAGE_EXPANDED = 50
_COMMITS_PAGE = 50


@dataclass(frozen=True)
class LoggedRequest:
    """One request the server answered, for tests that check which endpoints a client used."""

    method: str
    """HTTP method."""
    route: str
    """Route template (`/api/datasets/{repo}/commit/{rev}`), or UNROUTED when no route matched."""
    path: str
    """Raw request path with its query string."""
    status: int
    """Status code sent, or 0 (LOST_ANSWER) when the connection was closed unanswered on purpose."""


@dataclass
class Gate:
    """Holds requests of one route until released: lets a test kill a client at a chosen step."""

    method: str
    """HTTP method to hold."""
    route: str
    """Route template to hold (see _ROUTES)."""
    arrived: threading.Event = field(default_factory=threading.Event)
    """Set once a matching request (body fully read) is being held."""
    _released: threading.Event = field(default_factory=threading.Event)
    _drop: bool = True

    def release(self, *, drop: bool) -> None:
        """Let held requests go on; with drop=True they are closed unanswered, as if never received."""
        self._drop = drop
        self._released.set()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], hub: "LocalHub") -> None:
        super().__init__(addr, _Handler)
        self.hub = hub


class LocalHub:
    """The local Hub: owns the git store, the HTTP server thread, the request log and test gates."""

    def __init__(self, root: Path, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 lfs_threshold_bytes: int | None = None, tree_page_size: int = _TREE_PAGE,
                 user: str = "kerneltraj-local") -> None:
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"the local Hub binds to loopback only, not {host!r}")
        self.store = GitRepoStore(Path(root))
        self.token = token
        self.lfs_threshold_bytes = lfs_threshold_bytes
        self.tree_page_size = tree_page_size
        self.user = user
        self.requests: list[LoggedRequest] = []
        self._gates: list[Gate] = []
        self._faults: dict[tuple[str, str], list[int]] = {}
        self._lock = threading.Lock()
        self._signing_key = secrets.token_bytes(32)
        self._httpd = _Server((host, port), self)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "LocalHub":
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="local-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        for g in self._gates:
            g.release(drop=True)

    def __enter__(self) -> "LocalHub":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def gate(self, method: str, route: str) -> Gate:
        """Hold the next requests of `method route` until the returned gate is released."""
        g = Gate(method, route)
        with self._lock:
            self._gates.append(g)
        return g

    def fail_next(self, method: str, route: str, statuses: list[int]) -> None:
        """Answer the next len(statuses) requests of `method route` with these error codes (fault injection);
        LOST_ANSWER applies the request but closes the connection without an answer."""
        with self._lock:
            self._faults.setdefault((method, route), []).extend(statuses)

    def routes_called(self) -> set[str]:
        """Set of `METHOD route` strings answered so far."""
        with self._lock:
            return {f"{r.method} {r.route}" for r in self.requests}

    # internal hooks used by the handler
    def _log(self, entry: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(entry)

    def _take_gate(self, method: str, route: str) -> Gate | None:
        with self._lock:
            for g in self._gates:
                if g.method == method and g.route == route:
                    self._gates.remove(g)
                    return g
        return None

    def _take_fault(self, method: str, route: str) -> int | None:
        with self._lock:
            queue = self._faults.get((method, route))
            return queue.pop(0) if queue else None

    def _sign(self, repo_id: str, oid: str, size: int) -> str:
        return hmac.new(self._signing_key, f"{repo_id}:{oid}:{size}".encode(), hashlib.sha256).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the request log is kept in memory
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # ---- plumbing -------------------------------------------------------------------------------
    def _dispatch(self, method: str) -> None:
        hub = self.server.hub
        split = urlsplit(self.path)
        self.query = parse_qs(split.query, keep_blank_values=True)
        route, handler, params = UNROUTED, None, {}
        for m, template, rx, name in _ROUTES:
            match = rx.match(split.path)
            if m == method and match:
                route, handler, params = template, name, match.groupdict()
                break
        self.status_sent = 0
        try:
            body = self._read_body()
            gate = hub._take_gate(method, route)
            if gate is not None:
                gate.arrived.set()
                gate._released.wait()
                if gate._drop:
                    self.close_connection = True
                    hub._log(LoggedRequest(method, route, self.path, 0))
                    return
            fault = hub._take_fault(method, route)
            if fault is not None and fault != LOST_ANSWER:
                raise ApiError(fault, f"injected fault {fault}")
            if handler is None:
                raise ApiError(404, f"no route for {method} {split.path}")
            self._check_auth(write=handler in _WRITE_HANDLERS)
            decoded = {k: unquote(v) for k, v in params.items() if v is not None and k != "path"}
            if params.get("path"):
                decoded["path"] = "/".join(unquote(s) for s in params["path"].strip("/").split("/"))
            if "ns" in decoded:
                decoded["repo_id"] = f"{decoded.pop('ns')}/{decoded.pop('name')}"
                self._check_read_access(decoded["repo_id"])
            if fault == LOST_ANSWER:  # apply the request, then hang up as if the answer got lost
                self.wfile, real = io.BytesIO(), self.wfile
                try:
                    getattr(self, f"h_{handler}")(body=body, **decoded)
                finally:
                    self.wfile, self.status_sent, self.close_connection = real, 0, True
                    hub._log(LoggedRequest(method, route, self.path, LOST_ANSWER))
                return
            getattr(self, f"h_{handler}")(body=body, **decoded)
        except ApiError as e:
            self._send_json(e.status, {"error": e.message, **e.extra}, headers={"X-Error-Message": e.message,
                                                                     **({"X-Error-Code": e.code} if e.code else {})})
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as e:  # a bug in the double must surface as a 500, never a hang
            self._send_json(500, {"error": f"internal error: {type(e).__name__}: {e}"})
        finally:
            if self.status_sent:
                hub._log(LoggedRequest(method, route, self.path, self.status_sent))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self._read_exact(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        if length > _MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(413, "request body too large")
        return self._read_exact(length)

    def _read_exact(self, n: int) -> bytes:
        data = self.rfile.read(n)
        if len(data) != n:  # the client went away mid-upload: nothing of this request is applied
            raise ConnectionError("short body")
        return data

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization")
        if not auth:
            return None
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise ApiError(401, "Invalid credentials in Authorization header")
        return token

    def _check_auth(self, *, write: bool) -> None:
        expected = self.server.hub.token
        token = self._token()
        if token is not None and expected is not None and not hmac.compare_digest(token, expected):
            raise ApiError(401, "Invalid credentials in Authorization header")
        if write and expected is not None and token is None:
            raise ApiError(401, "write access needs a token: send `Authorization: Bearer <token>`")

    def _check_read_access(self, repo_id: str) -> None:
        meta = self.server.hub.store.meta(repo_id)
        if meta.get("private") and self.server.hub.token is not None and self._token() is None:
            raise ApiError(404, f"Repository {repo_id} not found", code="RepoNotFound")

    def _base(self) -> str:
        return f"http://{self.headers.get('Host') or self.server.hub.url.split('//')[1]}"

    def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":  # HEAD answers carry the headers of the GET, never a body
            self.wfile.write(body)
        self.status_sent = status

    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), {"Content-Type": "application/json", **(headers or {})})

    def _json_body(self, body: bytes) -> dict[str, Any]:
        try:
            obj = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"malformed JSON body: {e}") from None
        if not isinstance(obj, dict):
            raise ApiError(400, "JSON body must be an object")
        return obj

    def _flag(self, name: str) -> bool:
        values = self.query.get(name) or self.query.get(f"{name}[]") or ["false"]
        if values[-1].lower() not in ("true", "false", "1", "0", ""):
            raise ApiError(400, f"query parameter {name} must be a boolean")
        return values[-1].lower() in ("true", "1")

    def _no_pr(self) -> None:
        if self._flag("create_pr"):
            raise ApiError(400, "pull requests are not supported by the local Hub")

    # ---- endpoints ------------------------------------------------------------------------------
    def h_whoami(self, body: bytes) -> None:
        if self.server.hub.token is not None and self._token() is None:
            raise ApiError(401, "Invalid credentials in Authorization header")
        self._send_json(200, {"type": "user", "name": self.server.hub.user, "orgs": [],
                              "auth": {"type": "access_token", "accessToken": {"role": "write"}}})

    def h_create_repo(self, body: bytes) -> None:
        payload = self._json_body(body)
        if payload.get("type") != "dataset":
            raise ApiError(400, "the local Hub serves dataset repos only (type must be 'dataset')")
        name = payload.get("name")
        org = payload.get("organization") or self.server.hub.user
        if not isinstance(name, str) or not isinstance(org, str):
            raise ApiError(400, "create needs string `name` and `organization`")
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        repo_id = f"{org}/{name}"
        url = f"{self._base()}/datasets/{repo_id}"
        if not self.server.hub.store.create(repo_id, private=private):
            raise ApiError(409, "You already created this dataset repo", url=url)
        self._send_json(200, {"url": url, "name": repo_id, "id": repo_id})

    def h_validate_yaml(self, body: bytes) -> None:
        payload = self._json_body(body)
        if not isinstance(payload.get("content"), str):
            raise ApiError(400, "validate-yaml needs a string `content`")
        try:
            front_matter(payload["content"])
        except ValueError as e:
            self._send_json(400, {"errors": [{"message": str(e)}], "warnings": []})
            return
        self._send_json(200, {"errors": [], "warnings": []})

    def h_repo_info(self, body: bytes, repo_id: str, rev: str = "main") -> None:
        store = self.server.hub.store
        commit = store.resolve(repo_id, rev)
        entries = store.listing(repo_id, commit)
        blobs = self._flag("blobs")
        siblings = [_sibling(e, blobs) for e in entries if e.type == "file"]
        readme = next((e for e in entries if e.path == "README.md"), None)
        card: dict[str, Any] | None = None
        if readme is not None:
            try:
                card = front_matter(store.read(repo_id, readme).decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                card = None
        info = store.commit_info(repo_id, commit)
        meta = store.meta(repo_id)
        self._send_json(200, {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "author": repo_id.split("/")[0],
            "sha": commit, "lastModified": info["date"], "createdAt": meta["created_at"],
            "private": bool(meta.get("private")), "gated": False, "disabled": False, "downloads": 0, "likes": 0,
            "tags": [], "cardData": card, "siblings": siblings, "xetEnabled": False,
            "usedStorage": sum(e.size for e in entries if e.type == "file"),
        })

    def h_preupload(self, body: bytes, repo_id: str, rev: str) -> None:
        self._no_pr()
        store = self.server.hub.store
        commit = store.resolve(repo_id, rev, branch_only=True)
        files = self._json_body(body).get("files")
        if not isinstance(files, list) or not all(
                isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("size"), int)
                and isinstance(f.get("sample"), str) for f in files):
            raise ApiError(400, "preupload needs files: [{path, size, sample}]")
        existing = {e.path: e for e in store.listing(repo_id, commit) if e.type == "file"}
        threshold = self.server.hub.lfs_threshold_bytes
        out = []
        for f in files:
            path = store.check_path(f["path"])
            mode = "lfs" if threshold is not None and f["size"] >= threshold else "regular"
            old = existing.get(path)
            oid = None
            if old is not None:  # the client compares this with its own oid to drop unchanged files
                oid = old.lfs_sha256 if mode == "lfs" else (None if old.lfs_sha256 else old.oid)
            out.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": oid})
        self._send_json(200, {"files": out, "commitOid": commit})

    def h_commit(self, body: bytes, repo_id: str, rev: str) -> None:
        self._no_pr()
        if "ndjson" not in (self.headers.get("Content-Type") or ""):
            raise ApiError(400, "commit payload must be application/x-ndjson")
        try:
            lines = [json.loads(line) for line in body.decode("utf-8").splitlines() if line.strip()]
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ApiError(400, f"malformed ndjson commit payload: {e}") from None
        if not lines or not isinstance(lines[0], dict) or lines[0].get("key") != "header":
            raise ApiError(400, "commit payload must start with a header line")
        header = lines[0].get("value") or {}
        if not isinstance(header.get("summary"), str) or not header["summary"].strip():
            raise ApiError(400, "commit header needs a non-empty summary")
        ops = []
        for item in lines[1:]:
            value = item.get("value") if isinstance(item, dict) else None
            if not isinstance(value, dict) or not isinstance(value.get("path"), str):
                raise ApiError(400, f"malformed commit operation: {item!r:.200}")
            key = item.get("key")
            if key == "file":
                if value.get("encoding") != "base64" or not isinstance(value.get("content"), str):
                    raise ApiError(400, f"file {value['path']}: content must be base64")
                try:
                    content = base64.b64decode(value["content"], validate=True)
                except binascii.Error:
                    raise ApiError(400, f"file {value['path']}: invalid base64") from None
                ops.append(("file", value["path"], content))
            elif key == "lfsFile":
                if value.get("algo") != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", str(value.get("oid"))):
                    raise ApiError(400, f"lfsFile {value['path']}: needs algo sha256 and a hex oid")
                ops.append(("lfs", value["path"], (value["oid"], value.get("size"))))
            elif key in ("deletedFile", "deletedFolder"):
                ops.append((key, value["path"], None))
            else:
                raise ApiError(400, f"unknown commit operation key {key!r}")
        if not ops:
            raise ApiError(400, "empty commit: no operations")
        message = header["summary"] + (f"\n\n{header['description']}" if header.get("description") else "")
        sha = self.server.hub.store.commit(repo_id, rev, ops, message, parent=header.get("parentCommit"))
        self._send_json(200, {"success": True, "commitOid": sha, "pullRequestUrl": None,
                              "commitUrl": f"{self._base()}/datasets/{repo_id}/commit/{sha}"})

    def h_create_tag(self, body: bytes, repo_id: str, rev: str) -> None:
        payload = self._json_body(body)
        tag = payload.get("tag")
        if not isinstance(tag, str):
            raise ApiError(400, "create tag needs a string `tag`")
        message = payload.get("message")
        sha = self.server.hub.store.tag(repo_id, tag, rev, message if isinstance(message, str) else None)
        self._send_json(200, {"name": tag, "ref": f"refs/tags/{tag}", "targetCommit": sha})

    def h_delete_tag(self, body: bytes, repo_id: str, rev: str) -> None:
        self.server.hub.store.delete_tag(repo_id, rev)
        self._send_json(200, {})

    def h_refs(self, body: bytes, repo_id: str) -> None:
        refs = self.server.hub.store.refs(repo_id)

        def fmt(prefix: str) -> list[dict[str, str]]:
            return [{"name": r[len(prefix):], "ref": r, "targetCommit": c} for r, c in refs if r.startswith(prefix)]
        self._send_json(200, {"branches": fmt("refs/heads/"), "tags": fmt("refs/tags/"),
                              "converts": fmt("refs/convert/"), "pullRequests": fmt("refs/pr/")})

    def h_commits(self, body: bytes, repo_id: str, rev: str) -> None:
        store = self.server.hub.store
        commits = store.log(repo_id, store.resolve(repo_id, rev))
        start = _cursor(self.query)
        page = commits[start:start + _COMMITS_PAGE]
        self._send_json(200, page, headers=self._next_link(start + _COMMITS_PAGE, len(commits)))

    def h_tree(self, body: bytes, repo_id: str, rev: str, path: str = "") -> None:
        store = self.server.hub.store
        commit = store.resolve(repo_id, rev)
        entries = store.listing(repo_id, commit)
        if path and not any(e.path == path and e.type == "directory" for e in entries):
            raise ApiError(404, f"directory {path!r} not found at {rev}", code="EntryNotFound")
        prefix = f"{path}/" if path else ""
        recursive, expand = self._flag("recursive"), self._flag("expand")
        chosen = [e for e in entries if e.path.startswith(prefix)
                  and (recursive or "/" not in e.path[len(prefix):])]
        size = min(self.server.hub.tree_page_size, _TREE_PAGE_EXPANDED if expand else _TREE_PAGE)
        start = _cursor(self.query)
        page = [_tree_item(e, store, repo_id, commit, expand) for e in chosen[start:start + size]]
        self._send_json(200, page, headers=self._next_link(start + size, len(chosen)))

    def h_paths_info(self, body: bytes, repo_id: str, rev: str) -> None:
        store = self.server.hub.store
        commit = store.resolve(repo_id, rev)
        ctype = self.headers.get("Content-Type") or ""
        if "application/json" in ctype:
            form = self._json_body(body)
            paths, expand = form.get("paths"), bool(form.get("expand"))
        elif "application/x-www-form-urlencoded" in ctype:
            form = parse_qs(body.decode("utf-8"), keep_blank_values=True)
            paths, expand = form.get("paths"), (form.get("expand") or ["false"])[-1].lower() in ("true", "1")
        else:
            raise ApiError(400, "paths-info needs a form or JSON body")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ApiError(400, "paths-info needs `paths`: a list of strings")
        wanted = {p.strip("/") for p in paths}
        items = [_tree_item(e, store, repo_id, commit, expand)
                 for e in store.listing(repo_id, commit) if e.path in wanted]
        self._send_json(200, items)

    def h_resolve(self, body: bytes, repo_id: str, rev: str, path: str) -> None:
        store = self.server.hub.store
        commit = store.resolve(repo_id, rev)
        entry = next((e for e in store.listing(repo_id, commit) if e.path == path and e.type == "file"), None)
        if entry is None:
            raise ApiError(404, f"{path} not found at {rev}", code="EntryNotFound")
        data = store.read(repo_id, entry)
        etag = entry.lfs_sha256 or entry.oid
        headers = {"ETag": f'"{etag}"', "X-Repo-Commit": commit, "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if entry.lfs_sha256:  # the real Hub names the LFS object in these headers
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(entry.size)})
        status, data = _apply_range(self.headers.get("Range"), data, headers)
        self._send(status, data, headers)

    def h_lfs_batch(self, body: bytes, repo_id: str) -> None:
        hub, store = self.server.hub, self.server.hub.store
        store.resolve(repo_id, "main")
        payload = self._json_body(body)
        objects = payload.get("objects")
        if payload.get("operation") != "upload" or not isinstance(objects, list):
            raise ApiError(400, "LFS batch: only operation=upload with an objects list is supported")
        if "basic" not in (payload.get("transfers") or ["basic"]):
            raise ApiError(400, "LFS batch: only the basic transfer is offered")
        out = []
        for obj in objects:
            oid, size = (obj or {}).get("oid"), (obj or {}).get("size")
            if not isinstance(oid, str) or not re.fullmatch(r"[0-9a-f]{64}", oid) or not isinstance(size, int):
                raise ApiError(400, f"LFS batch: malformed object {obj!r:.200}")
            item: dict[str, Any] = {"oid": oid, "size": size, "authenticated": True}
            if not store.has_lfs(oid, size):
                sig = hub._sign(repo_id, oid, size)
                item["actions"] = {
                    "upload": {"href": f"{self._base()}/lfs-upload/{repo_id}/{oid}?size={size}&sig={sig}"},
                    "verify": {"href": f"{self._base()}/datasets/{repo_id}.git/info/lfs/objects/verify"}}
            out.append(item)
        self._send(200, json.dumps({"transfer": "basic", "objects": out}).encode(),
                   {"Content-Type": "application/vnd.git-lfs+json"})

    def h_lfs_put(self, body: bytes, repo_id: str, oid: str) -> None:
        size_q, sig_q = self.query.get("size", [""])[-1], self.query.get("sig", [""])[-1]
        if not size_q.isdigit() or not hmac.compare_digest(sig_q, self.server.hub._sign(repo_id, oid, int(size_q))):
            raise ApiError(403, "upload URL signature invalid")
        self.server.hub.store.put_lfs(oid, int(size_q), body)
        self._send(200, b"", {"ETag": f'"{oid}"'})

    def h_lfs_verify(self, body: bytes, repo_id: str) -> None:
        payload = self._json_body(body)
        if not self.server.hub.store.has_lfs(str(payload.get("oid")), payload.get("size")):
            raise ApiError(404, "LFS object not uploaded")
        self._send_json(200, {"success": True})

    def _next_link(self, next_start: int, total: int) -> dict[str, str]:
        if next_start >= total:
            return {}
        split = urlsplit(self.path)
        query = {k: v for k, v in self.query.items() if k != "cursor"}
        query["cursor"] = [base64.urlsafe_b64encode(str(next_start).encode()).decode()]
        qs = "&".join(f"{quote(k)}={quote(v)}" for k, vs in query.items() for v in vs)
        return {"Link": f'<{self._base()}{split.path}?{qs}>; rel="next"'}


def _cursor(query: dict[str, list[str]]) -> int:
    raw = query.get("cursor", [""])[-1]
    if not raw:
        return 0
    try:
        return int(base64.urlsafe_b64decode(raw.encode()).decode())
    except (ValueError, binascii.Error):
        raise ApiError(400, "malformed pagination cursor") from None


def _apply_range(range_header: str | None, data: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    headers["Content-Length"] = str(len(data))
    if not range_header:
        return 200, data
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", range_header.strip())
    if not m or (m.group(1) == "" and m.group(2) == ""):
        raise ApiError(416, f"unsupported Range {range_header!r}")
    n = len(data)
    if m.group(1) == "":
        start, end = max(n - int(m.group(2)), 0), n - 1
    else:
        start, end = int(m.group(1)), min(int(m.group(2)) if m.group(2) else n - 1, n - 1)
    if start >= n or start > end:
        headers["Content-Range"] = f"bytes */{n}"
        raise ApiError(416, f"Range {range_header!r} outside {n} bytes")
    headers["Content-Range"] = f"bytes {start}-{end}/{n}"
    headers["Content-Length"] = str(end - start + 1)
    return 206, data[start:end + 1]


def _sibling(e: RepoEntry, blobs: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rfilename": e.path}
    if blobs:
        out.update({"size": e.size, "blobId": e.oid})
        if e.lfs_sha256:
            out["lfs"] = {"sha256": e.lfs_sha256, "size": e.size, "pointerSize": e.pointer_size}
    return out


def _tree_item(e: RepoEntry, store: GitRepoStore, repo_id: str, commit: str, expand: bool) -> dict[str, Any]:
    item: dict[str, Any] = {"type": e.type, "oid": e.oid, "size": e.size, "path": e.path}
    if e.lfs_sha256:
        item["lfs"] = {"oid": e.lfs_sha256, "size": e.size, "pointerSize": e.pointer_size}
    if expand:
        item["lastCommit"] = store.last_commit(repo_id, commit, e.path)
    return item


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.hub_server", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0: any free port)")
    p.add_argument("--root", type=Path, required=True, help="directory holding the git repositories")
    p.add_argument("--token", default=None, help="token required for writes (default: none required)")
    p.add_argument("--lfs-threshold-bytes", type=int, default=None,
                   help="files at least this large go through git-LFS (default: all regular)")
    args = p.parse_args(argv)
    hub = LocalHub(args.root, port=args.port, token=args.token, lfs_threshold_bytes=args.lfs_threshold_bytes)
    # shutdown() blocks until serve_forever returns, so it must run off the serving (main) thread
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: threading.Thread(target=hub._httpd.shutdown, daemon=True).start())
    print(f"local Hub serving {args.root} on {hub.url}", flush=True)
    hub._httpd.serve_forever()
    hub._httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
