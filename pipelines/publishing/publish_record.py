"""The record of a publish: `<releases_dir>/<version>.published.json`, beside the release folder it describes
(outside it, so the record never becomes part of the content it describes); `kerneltraj status` and the
read-back check read it."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def publish_record_path(releases_dir: Path, version: str) -> Path:
    return releases_dir / f"{version}.published.json"


def read_publish_record(releases_dir: Path, version: str) -> dict[str, Any] | None:
    path = publish_record_path(releases_dir, version)
    return json.loads(path.read_text()) if path.is_file() else None


def write_publish_record(releases_dir: Path, version: str, record: dict[str, Any]) -> Path:
    """Replace the record whole: a reader sees the previous record or this one."""
    out = publish_record_path(releases_dir, version)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    tmp.replace(out)
    return out
