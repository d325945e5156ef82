"""The release folder: parquet per published table and split, a dataset card and a NOTICE, swapped into place
whole, and the checks of what reached it.

Layout (loadable with `datasets.load_dataset(<folder>, <config>)`; the card's `configs:` name each split's files):
    <releases_dir>/<version>/README.md                         the card (pipelines/reporting/dataset_card.md)
    <releases_dir>/<version>/NOTICE                            attribution of every source, upstream NOTICEs
    <releases_dir>/<version>/data/<config>/<split>-00000-of-00001.parquet
A config with rows per task has the splits train / validation / test_heldout of the frozen manifest; any
other config has one split, `full`.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

import duckdb

from grader.contract import GRADER_VERSION
from grader.labels import TIE_BAND_LOG2
from grader.taskcard import size_key
from pipelines.core.warehouse import PARQUET_ROW_GROUP_ROWS, copy_parquet, load_sql, query_dicts, scalar
from pipelines.curation.split_policy import DEFAULT_POLICY, Split
from pipelines.reporting.cost import accounting_sections
from pipelines.reporting.release_card import annotate_parquet, code_commit, configs, render_card

CONFIGS: dict[str, str] = {name: c["what"] for name, c in configs().items()}
"""Published configs (pipelines/reporting/dataset_card.yaml), each the query `release.<config>` in sql/release.sql."""
SPLIT_CONFIGS = tuple(name for name, c in configs().items() if c["split_by_task"])
"""Configs with rows per task: written per split of the frozen manifest, with a `split` column."""
TASK_SPLITS = tuple(s.value for s in Split)
WHOLE_SPLIT = "full"
"""The one split of a config without tasks (ledger, quarantine, accounting, fingerprints)."""
DEFAULT_CONFIG = "trajectories"
RELEASE_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
"""What a release version may be: it names a folder."""
SEALED_COLUMNS = ("hidden_sizes", "expert", "expert_source")


def config_splits(config: str) -> tuple[str, ...]:
    return TASK_SPLITS if config in SPLIT_CONFIGS else (WHOLE_SPLIT,)


def shard_path(root: Path, config: str, split: str | None = None) -> Path:
    """The one shard of `split` of `config` (a config without tasks has only the split `full`)."""
    if split is None:
        if config in SPLIT_CONFIGS:
            raise ValueError(f"config {config} is written per split {TASK_SPLITS}: name one, or use config_shards")
        split = WHOLE_SPLIT
    if split not in config_splits(config):
        raise ValueError(f"config {config} has no split {split!r}; it has {config_splits(config)}")
    return root / "data" / config / f"{split}-00000-of-00001.parquet"


def config_shards(root: Path, config: str) -> list[Path]:
    """The shards a release holds for a config, split by split: together they hold all its rows."""
    return [p for p in (shard_path(root, config, s) for s in config_splits(config)) if p.is_file()]


def data_files(root: Path) -> dict[str, list[dict[str, str]]]:
    """The card's `data_files` per config: one entry per split written, as `datasets` and the Hub read them."""
    return {c: [{"split": p.name.split("-", 1)[0], "path": f"data/{c}/{p.name.split('-', 1)[0]}-*.parquet"}
                for p in config_shards(root, c)] for c in CONFIGS}


def _query(config: str) -> str:
    return load_sql(f"release.{config}").rstrip().rstrip(";")


def split_query(config: str, split: str) -> str:
    """The rows of one split of a config (all rows for a config without tasks)."""
    query = _query(config)
    if config not in SPLIT_CONFIGS:
        return query
    if split not in TASK_SPLITS:  # inlined into COPY, which takes no parameters: only the closed set
        raise ValueError(f"unknown split {split!r}")
    template = load_sql("release.split_shard").rstrip().rstrip(";")
    return template.replace("{split}", split).replace("{query}", query)


def warehouse_split_rows(con: duckdb.DuckDBPyConnection, config: str) -> dict[str | None, int]:
    """Rows per split of a config's query in the warehouse (key None: rows whose task has no split)."""
    if config not in SPLIT_CONFIGS:
        return {WHOLE_SPLIT: int(scalar(con, f"SELECT count(*) FROM ({_query(config)})"))}
    rows = query_dicts(con, load_sql("release.split_rows").replace("{query}", _query(config)))
    return {r["split"]: int(r["n"]) for r in rows}


def export_configs(con: duckdb.DuckDBPyConnection, root: Path) -> dict[str, dict[str, int]]:
    """Write each config's shards, one per split, with column descriptions; returns rows per config per split.

    Refuses a config with a row whose task is in no split: it would silently fall out of every split."""
    out: dict[str, dict[str, int]] = {}
    for config in CONFIGS:
        expected = warehouse_split_rows(con, config)
        if None in expected:
            raise RuntimeError(f"{expected[None]} row(s) of config {config} have a task outside the split manifest; "
                               "nothing published: rebuild family_splits")
        out[config] = {}
        for split in config_splits(config):
            path = shard_path(root, config, split)
            path.parent.mkdir(parents=True, exist_ok=True)
            # bounded memory at 1M attempts: the wide config is sorted on one thread (copy_parquet)
            copy_parquet(con, split_query(config, split), path, wide_rows=config == "attempts")
            annotate_parquet(path, config, PARQUET_ROW_GROUP_ROWS)
            out[config][split] = int(scalar(con, "SELECT count(*) FROM read_parquet($path)", {"path": str(path)}))
        if sum(out[config].values()) != sum(expected.values()):
            raise RuntimeError(f"config {config}: {out[config]} rows written, {expected} in the warehouse")
        # `datasets` refuses to load a declared split without rows, so an empty split is not written; a config
        # with no rows at all keeps its first shard, so its columns are still published.
        empty = [s for s, n in out[config].items() if n == 0]
        for split in empty[1:] if len(empty) == len(out[config]) else empty:
            shard_path(root, config, split).unlink()
    return out


def column_types(root: Path) -> dict[str, dict[str, str]]:
    """Arrow type of every published column, per config (from its first shard)."""
    import pyarrow.parquet as pq

    return {c: {f.name: str(f.type) for f in pq.read_schema(config_shards(root, c)[0])} for c in CONFIGS}


def sealed_problems(root: Path, catalogue: dict) -> list[dict[str, Any]]:
    """Anything sealed that reached the release: sealed columns, hidden size keys, expert source text."""
    problems: list[dict[str, Any]] = []
    hidden = {c.task_id: {size_key(s) for sizes in c.hidden_sizes.values() for s in sizes} for c in catalogue.values()}
    experts = [c.expert.strip() for c in catalogue.values() if len(c.expert.strip()) > 40]
    con = duckdb.connect()
    try:
        for config in CONFIGS:
            shards = config_shards(root, config)
            if not shards:
                problems.append({"config": config, "problem": "no shard"})
            for path in shards:
                problems += _sealed_in_shard(con, config, path, hidden, experts)
    finally:
        con.close()
    return problems


def _sealed_in_shard(con: duckdb.DuckDBPyConnection, config: str, path: Path, hidden: dict[str, set],
                     experts: list[str]) -> list[dict[str, Any]]:
    problems: list[dict[str, Any]] = []
    rel = con.execute("SELECT * FROM read_parquet($path)", {"path": str(path)})
    cols = [d[0] for d in rel.description]
    problems += [{"config": config, "problem": f"sealed column {c}"} for c in cols if c in SEALED_COLUMNS]
    for row in rel.fetchall():
        rec = dict(zip(cols, row))
        text = json.dumps(rec, default=str)
        problems += [{"config": config, "problem": "expert source text"} for e in experts if e in text]
        if config == "grades":
            for s in json.loads(rec["sizes"] or "[]"):
                if s.get("hidden") and (not s["size_key"].startswith("hidden#")
                                        or s["size_key"] in hidden.get(rec["task_id"], ())):
                    problems.append({"config": config, "problem": f"hidden size of {rec['attempt_id']}"})
        if config == "tasks":
            card = json.loads(rec["public_card"])
            problems += [{"config": config, "problem": f"card field {k} in {rec['task_id']}"}
                         for k in SEALED_COLUMNS if k in card]
    return problems


def dataset_card(version: str, run_id: str, rows: dict[str, int], facts: dict[str, Any],
                 revalidation_md: str = "", split_rows: dict[str, dict[str, int]] | None = None,
                 types: dict[str, dict[str, str]] | None = None, root: Path | None = None) -> str:
    """README.md with YAML front matter: Hub configs with the splits written under `root` (none without it)
    plus the identities that pin this release."""
    return render_card(version, run_id, rows, facts, data_files=data_files(root) if root else {},
                       default_config=DEFAULT_CONFIG,
                       split_rows=split_rows, types=types, revalidation_md=revalidation_md)


def release_facts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    ids = query_dicts(con, load_sql("release.identities"))[0]
    manifest = query_dicts(con, load_sql("release.manifest"))
    return {
        "grader_version": GRADER_VERSION,
        "code_commit": code_commit(),
        "task_revisions": {r["task_id"]: r["task_revision"] for r in query_dicts(con, load_sql("release.tasks"))},
        "fingerprint_ids": sorted(ids["fingerprint_ids"] or []),
        "devices": sorted(ids["devices"] or []),
        "backends": sorted(ids["backends"] or []),
        "profiles": sorted(ids["profiles"] or []),
        "tie_band_log2": TIE_BAND_LOG2,
        "sources": [r["source"] for r in query_dicts(con, load_sql("release.sources"))],
        "split_manifest": {
            "version": manifest[0]["split_version"] if manifest else DEFAULT_POLICY.version,
            "sha256": manifest[0]["manifest_sha256"] if manifest else None,
            **{k: v for k, v in dataclasses.asdict(DEFAULT_POLICY).items()
               if k in ("held_out_families", "held_out_lineages", "validation_fraction")}},
        "accounting": accounting_sections(query_dicts(con, load_sql("accounting.published"))),
    }


def swap_into_place(staging: Path, final: Path) -> None:
    """Replace `final` by `staging` with renames only, so readers see the old or the new release, whole."""
    old = final.with_name(f".{final.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    staging.rename(final)
    if old.exists():
        shutil.rmtree(old)


def shard_problems(con: duckdb.DuckDBPyConnection, root: Path) -> list[dict[str, Any]]:
    """Each config and split whose shard under `root` does not hold the rows the warehouse query gives (a missing
    shard, a row count that differs, rows whose task lies outside the split manifest)."""
    bad: list[dict[str, Any]] = []
    for config in CONFIGS:
        want = warehouse_split_rows(con, config)
        for split in config_splits(config):
            path = shard_path(root, config, split)
            got = (int(scalar(con, "SELECT count(*) FROM read_parquet($path)", {"path": str(path)}))
                   if path.is_file() else 0 if want.get(split, 0) == 0 else None)
            if got != want.get(split, 0):
                bad.append({"config": config, "split": split, "warehouse_rows": want.get(split, 0),
                            "parquet_rows": got})
        if None in want:
            bad.append({"config": config, "split": None, "warehouse_rows": want[None], "parquet_rows": None})
        if not config_shards(root, config):
            bad.append({"config": config, "split": None, "warehouse_rows": 0, "parquet_rows": None})
    return bad


def lineage_problems(root: Path) -> list[dict[str, Any]]:
    """Published grades and revalidated records under `root` without attempt_id, task_revision, grader_version or
    fingerprint_id."""
    bad: list[dict[str, Any]] = []
    with duckdb.connect() as con:
        for config in ("grades", "revalidated"):
            for path in config_shards(root, config):
                bad += [{"config": config, "attempt_id": r[0]} for r in con.execute(
                    load_sql("release.missing_lineage"), {"path": str(path)}).fetchall()]
    return bad
