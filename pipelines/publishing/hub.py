"""Publish a versioned dataset release (parquet shards + dataset card) to the Hugging Face Hub.

One release = one commit holding exactly the release's files, plus one tag naming it. Publishing is
idempotent and resumable: the Hub's current state is compared with the release by content hashes, so a
re-run after a crash makes no duplicate commit and only adds what is missing (usually the tag). A
published tag is never moved: a version names one content forever.
"""
from __future__ import annotations

import contextlib
import contextvars
import fnmatch
import hashlib
import json
import os
import random
import re
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import dagster as dg
from pydantic import Field

HUB_MANAGED_FILES = frozenset({".gitattributes"})
"""Files the Hub creates in every repo; a release that lacks them does not delete them."""

VERSION_RE = re.compile(r"v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?")
"""Accepted release versions (`v1.3.0`, `v2.0.0-rc.1`): they become git tags."""

UNCONFIGURED = ("no Hub repo configured: set KERNELTRAJ_HUB_REPO=<namespace>/<name> (and KERNELTRAJ_HUB_ENDPOINT "
                "for a Hub other than https://huggingface.co, HF_TOKEN to a token with write access), or pass "
                "--repo/--endpoint to `kerneltraj publish`")
"""Why nothing can be published yet, and how to say where to."""

_T = TypeVar("_T")


class HubPublishError(RuntimeError):
    """A publish step failed; the message says what happened and what to do next."""


class VersionPinnedError(HubPublishError):
    """The version's tag already names different content: a published version never changes."""


@dataclass(frozen=True)
class ReleaseFile:
    """One file of a release directory, with the hashes the Hub reports for it."""

    path: str
    """Path inside the repo, `/`-separated, relative to the release directory."""
    size_bytes: int
    """File size in bytes."""
    sha256: str
    """sha256 of the content: the Hub's oid for LFS/Xet files."""
    git_blob_id: str
    """Git blob id (sha1 of `blob <size>\\0` + content): the Hub's oid for regular files."""


@dataclass(frozen=True)
class PublishResult:
    """What a publish left on the Hub."""

    repo_id: str
    """Dataset repo, `namespace/name`."""
    tag: str
    """The version tag, now pointing at `commit_sha`."""
    commit_sha: str
    """Commit holding exactly the release's files (plus Hub-managed files)."""
    files: tuple[str, ...]
    """Repo paths of the release's files, sorted."""
    created_commit: bool
    """False when the Hub already held this content and no commit was made."""


def scan_release(release_dir: Path) -> list[ReleaseFile]:
    """Hash every file of a release directory; rejects an empty dir, symlinks and a missing dataset card."""
    release_dir = Path(release_dir)
    if not release_dir.is_dir():
        raise HubPublishError(f"release dir {release_dir} does not exist: build the release first")
    files = []
    for p in sorted(release_dir.rglob("*")):
        if p.is_symlink():
            raise HubPublishError(f"{p} is a symlink: a release holds real files only")
        if p.is_file():
            size = p.stat().st_size
            sha256, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
            with p.open("rb") as fh:  # streamed: shards can be far larger than memory allows twice
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    sha256.update(chunk)
                    blob.update(chunk)
            files.append(ReleaseFile(path=p.relative_to(release_dir).as_posix(), size_bytes=size,
                                     sha256=sha256.hexdigest(), git_blob_id=blob.hexdigest()))
    if not any(f.path == "README.md" for f in files):
        raise HubPublishError(f"{release_dir} has no README.md: every release needs its dataset card")
    _check_card(release_dir / "README.md", {f.path for f in files})
    return files


def _check_card(readme: Path, paths: set[str]) -> None:
    """Each config the card declares must match at least one file, or load_dataset fails for users."""
    import yaml  # the card's front matter is YAML

    text = readme.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return
    block = text.split("\n---", 1)[0].removeprefix("---")
    try:
        meta = yaml.safe_load(block) or {}
    except yaml.YAMLError as e:
        raise HubPublishError(f"{readme}: front matter is not valid YAML ({e}); fix the card") from None
    for config in meta.get("configs") or []:
        data_files = config.get("data_files") or []
        specs = data_files if isinstance(data_files, list) else [data_files]
        for spec in specs:
            for pattern in ([spec] if isinstance(spec, str) else
                            [spec.get("path")] if isinstance(spec.get("path"), str) else spec.get("path") or []):
                if not any(fnmatch.fnmatch(p, pattern) for p in paths):
                    raise HubPublishError(
                        f"{readme}: config {config.get('config_name')!r} lists data_files {pattern!r}, which "
                        "matches no file of the release; fix the card or the shard names")


def _same_content(local: ReleaseFile, remote: Any) -> bool:
    """Compare by the Hub's own oids: sha256 for LFS/Xet files, the git blob id for regular ones."""
    lfs = getattr(remote, "lfs", None)
    if lfs is not None:
        return lfs.sha256 == local.sha256 and lfs.size == local.size_bytes
    return remote.blob_id == local.git_blob_id


class HubPublisher(dg.ConfigurableResource):
    """Publishes release directories as tagged commits of one Hub dataset repo."""

    endpoint: str = Field(default="https://huggingface.co", description="Hub base URL (a local Hub in tests).")
    repo_id: str = Field(description="Dataset repo `namespace/name`.")
    token_env_var: str = Field(default="HF_TOKEN",
                               description="Environment variable holding the write token (never stored).")
    private: bool = Field(default=True, description="Visibility when the repo is first created.")
    timeout_s: float = Field(default=60.0, description="Per-request HTTP timeout, seconds.")
    max_retries: int = Field(default=4, description="Retries per step on 5xx, 429 and connection errors.")
    backoff_s: float = Field(default=1.0, description="First retry delay, seconds; doubles per retry.")

    # ---- public API ---------------------------------------------------------------------------
    def publish(self, release_dir: Path, version: str) -> PublishResult:
        """Make tag `version` name one commit holding exactly release_dir's files; safe to re-run."""
        _check_version(version)
        release_dir = Path(release_dir)
        files = scan_release(release_dir)
        api = self._api()
        with _client_timeout(self.timeout_s):
            self._step("create repo", lambda: api.create_repo(
                self.repo_id, repo_type="dataset", private=self.private, exist_ok=True))
            tagged = self._tag_target(api, version)
            if tagged is not None:  # already published (or pinned to other content)
                self._check_tagged(api, version, tagged, files)
                return self._result(version, tagged, files, created=False)
            commit_sha, created = self._sync_main(api, release_dir, files, version)
            self._tag(api, version, commit_sha, files)
        return self._result(version, commit_sha, files, created=created)

    def dry_run(self, release_dir: Path, version: str, out_dir: Path) -> Path:
        """Write the operations a publish would commit (manifest.json + the files) to out_dir; no network."""
        _check_version(version)
        release_dir, out_dir = Path(release_dir), Path(out_dir)
        files = scan_release(release_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in files:
            dest = out_dir / "files" / f.path
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(release_dir / f.path, dest)
        manifest = {
            "endpoint": self.endpoint, "repo_id": self.repo_id, "repo_type": "dataset", "tag": version,
            "revision": "main", "commit_message": f"Release {version}",
            "operations": [{"op": "add", **asdict(f)} for f in files],
            "deletions": "every file on main that the release lacks, except " + ", ".join(sorted(HUB_MANAGED_FILES)),
            "files_dir": "files",
        }
        path = out_dir / "manifest.json"
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        return path

    # ---- steps ----------------------------------------------------------------------------------
    def _api(self) -> Any:
        from huggingface_hub import HfApi  # imported late: a Dagster code location loads without it

        token = os.environ.get(self.token_env_var) or None
        # False, not None: never fall back to a token cached on disk or found in another variable
        return HfApi(endpoint=self.endpoint.rstrip("/"), token=token if token else False)

    def _tag_target(self, api: Any, version: str) -> str | None:
        refs = self._step("list refs", lambda: api.list_repo_refs(self.repo_id, repo_type="dataset"))
        return next((t.target_commit for t in refs.tags if t.name == version), None)

    def _remote_files(self, api: Any, revision: str) -> dict[str, Any]:
        entries = self._step("list files", lambda: list(api.list_repo_tree(
            self.repo_id, repo_type="dataset", revision=revision, recursive=True)))
        return {e.path: e for e in entries if hasattr(e, "blob_id")}

    def _differences(self, files: list[ReleaseFile], remote: dict[str, Any]) -> tuple[list[ReleaseFile], list[str]]:
        local = {f.path for f in files}
        changed = [f for f in files if f.path not in remote or not _same_content(f, remote[f.path])]
        removed = sorted(p for p in remote if p not in local and p not in HUB_MANAGED_FILES)
        return changed, removed

    def _check_tagged(self, api: Any, version: str, commit: str, files: list[ReleaseFile]) -> None:
        changed, removed = self._differences(files, self._remote_files(api, commit))
        if changed or removed:
            raise VersionPinnedError(
                f"{self.repo_id}: tag {version} already points at commit {commit[:12]}, whose files differ from "
                f"this release (changed or new: {[f.path for f in changed][:5]}, missing here: {removed[:5]}). "
                "A published version is pinned forever: publish this content under a new version.")

    def _sync_main(self, api: Any, release_dir: Path, files: list[ReleaseFile], version: str) -> tuple[str, bool]:
        """Bring main to exactly the release's files in one commit; returns (commit, whether we made it)."""
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete
        from huggingface_hub.errors import HfHubHTTPError

        first_head: str | None = None
        attempted = False
        for attempt in range(self.max_retries + 1):
            head = self._step("read main", lambda: api.dataset_info(self.repo_id, revision="main").sha)
            first_head = first_head or head
            changed, removed = self._differences(files, self._remote_files(api, head))
            if not changed and not removed:  # already there: a re-run, or a commit whose tag was never made
                return head, attempted and head != first_head
            # fresh operation objects each attempt: the client marks them as used
            ops = [CommitOperationAdd(f.path, str(release_dir / f.path)) for f in changed]
            ops += [CommitOperationDelete(p) for p in removed]
            try:
                attempted = True
                info = api.create_commit(
                    self.repo_id, ops, repo_type="dataset", revision="main", parent_commit=head,
                    commit_message=f"Release {version}",
                    commit_description=f"{len(changed)} file(s) added or changed, {len(removed)} removed.")
                return info.oid, True
            except Exception as e:  # noqa: BLE001 - classified just below
                moved = isinstance(e, HfHubHTTPError) and _status(e) in (409, 412)
                if not (moved or _transient(e)) or attempt == self.max_retries:
                    raise self._failure("commit", e, attempt + 1) from e
                # main moved, or the answer was lost: re-read main before deciding anything again
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _tag(self, api: Any, version: str, commit_sha: str, files: list[ReleaseFile]) -> None:
        from huggingface_hub.errors import HfHubHTTPError

        try:
            self._step("create tag", lambda: api.create_tag(
                self.repo_id, tag=version, revision=commit_sha, repo_type="dataset",
                tag_message=f"Release {version} ({len(files)} files)"))
        except HubPublishError as e:
            cause = e.__cause__
            if not (isinstance(cause, HfHubHTTPError) and _status(cause) == 409):
                raise
            # the tag appeared meanwhile (a lost answer to our own request, or a concurrent publish)
        target = self._tag_target(api, version)
        if target is None:
            raise HubPublishError(f"{self.repo_id}: tag {version} is missing right after creating it; re-run publish")
        if target != commit_sha:
            self._check_tagged(api, version, target, files)

    def _result(self, version: str, commit: str, files: list[ReleaseFile], *, created: bool) -> PublishResult:
        return PublishResult(self.repo_id, version, commit, tuple(f.path for f in files), created)

    # ---- retries and errors ---------------------------------------------------------------------
    def _step(self, name: str, fn: Callable[[], _T]) -> _T:
        for attempt in range(self.max_retries + 1):
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - classified just below
                if not _transient(e) or attempt == self.max_retries:
                    raise self._failure(name, e, attempt + 1) from e
                self._sleep(attempt)
        raise AssertionError("unreachable")

    def _sleep(self, attempt: int) -> None:
        delay = min(self.backoff_s * 2 ** attempt, 30.0)
        time.sleep(delay * (0.5 + random.random() / 2))  # jitter: concurrent publishers spread out

    def _failure(self, step: str, e: Exception, attempts: int) -> HubPublishError:
        status = _status(e)
        if status in (401, 403):
            hint = (f"the Hub refused the credentials: set {self.token_env_var} to a token with write access "
                    f"to {self.repo_id}")
        elif _transient(e):
            hint = ("the Hub or the network kept failing; re-run the same publish later: it resumes (a commit "
                    "already holding these files is found by content and tagged, nothing is duplicated)")
        else:
            hint = "fix the cause above and re-run the same publish: it resumes where it stopped"
        return HubPublishError(
            f"publishing to {self.endpoint} {self.repo_id}: step '{step}' failed after {attempts} attempt(s): "
            f"{type(e).__name__}: {' '.join(str(e).split())[:500]}. Existing tags are untouched; {hint}.")


def _check_version(version: str) -> None:
    if not VERSION_RE.fullmatch(version):
        raise HubPublishError(f"version {version!r} is not like v1.2.3 (optionally -rc.1): pick a semantic version")


def _status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None)


def _transient(e: BaseException) -> bool:
    """5xx, 429 and connection-level failures are worth retrying; anything else is the caller's to fix."""
    import httpx2  # the transport huggingface_hub 2.x uses

    status = _status(e)
    if status is not None:
        return status >= 500 or status == 429
    return isinstance(e, (httpx2.TransportError, ConnectionError, TimeoutError))


_PUBLISH_TIMEOUT: contextvars.ContextVar[float | None] = contextvars.ContextVar("kerneltraj_publish_timeout",
                                                                                 default=None)
_ACTIVE_TIMEOUTS: dict[int, float] = {}
"""Timeouts of the publishes running now, by their context token's id: the fall-back for requests that
huggingface_hub sends from threads of its own (LFS uploads), which do not inherit the publish's context."""
_TIMEOUT_LOCK = threading.Lock()


def _timeout_hook(request: Any) -> None:
    """A request hook of huggingface_hub's shared client: a request sent during a publish gets that publish's
    timeout (its context's, else the longest of those running); any other request is left as it was."""
    import httpx2

    timeout_s = _PUBLISH_TIMEOUT.get()
    if timeout_s is None:
        with _TIMEOUT_LOCK:
            timeout_s = max(_ACTIVE_TIMEOUTS.values(), default=None)
    if timeout_s is not None:
        request.extensions = {**request.extensions, "timeout": httpx2.Timeout(timeout_s).as_dict()}


@contextlib.contextmanager
def _client_timeout(timeout_s: float) -> Iterator[None]:
    """Requests sent during a publish time out after `timeout_s`.

    huggingface_hub 2.x has no per-call timeout on HfApi's write methods, and its shared client has none at
    all, so a hung Hub would hang the run. The hook is added once to that client (public API:
    `huggingface_hub.get_session` and httpx's `event_hooks`), never swapped out, and decides per request:
    concurrent publishes keep their own timeouts, and other users of the client are untouched.
    """
    import huggingface_hub

    client = huggingface_hub.get_session()
    with _TIMEOUT_LOCK:
        hooks = client.event_hooks
        if _timeout_hook not in hooks["request"]:
            client.event_hooks = {**hooks, "request": [*hooks["request"], _timeout_hook]}
    token = _PUBLISH_TIMEOUT.set(timeout_s)
    with _TIMEOUT_LOCK:
        _ACTIVE_TIMEOUTS[id(token)] = timeout_s
    try:
        yield
    finally:
        with _TIMEOUT_LOCK:
            del _ACTIVE_TIMEOUTS[id(token)]
        _PUBLISH_TIMEOUT.reset(token)
