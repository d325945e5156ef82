"""Records of committed GPU runs under docs/measurements: a run's `grades.jsonl` over 300 KB is committed gzipped
(`grades.jsonl.gz`, `gzip -9 -n`), and read the same. The whole working tree travels to the device on every call,
64 MiB at most: plain, the runs' grades alone had grown to 53 MB of it."""
from __future__ import annotations

import gzip
from pathlib import Path


def jsonl_lines(path: Path) -> list[str]:
    """The non-empty lines of `path`, or of `path` + ".gz" where only that is committed."""
    gz = path.with_name(path.name + ".gz")
    text = path.read_text() if path.exists() or not gz.exists() else gzip.decompress(gz.read_bytes()).decode()
    return [line for line in text.splitlines() if line.strip()]


def grade_files(root: Path, pattern: str = "*/acc/grades.jsonl") -> list[Path]:
    """Every run's grades file under `root` matching `pattern`, gzipped or not, named as if plain."""
    found = set(root.glob(pattern)) | {p.with_name(p.name[:-3]) for p in root.glob(pattern + ".gz")}
    return sorted(found)
