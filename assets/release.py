"""Stage 8, release: parquet per published table plus a dataset card, written atomically.

Layout (loadable with `datasets.load_dataset(<folder>, <config>)`):
    <releases_dir>/<version>/README.md
    <releases_dir>/<version>/data/<config>/train-00000-of-00001.parquet
"""

import datetime as dt
import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import Any

import dagster as dg
from dagster import AssetExecutionContext
import duckdb

from assets.accounting import accounting_sections
from assets.common import GROUP_RELEASE, OWNER, check_result
from assets.revalidation import TIE_BAND_LOG2
from grader.catalogue import load_catalogue
from grader.contract import GRADER_VERSION, REWARD_FLOOR
from grader.taskcard import size_key
from pipelines.contention_report import dataset_card_section
from pipelines.markup import card_body, front_matter_card, md_escape
from pipelines.resources import AttemptSources, ReleaseTarget, Warehouse, resolve_path
from pipelines.warehouse import copy_parquet, load_sql, markdown_table, query_dicts, run_script, scalar, transaction

CONFIGS: dict[str, str] = {
    "attempts": "Raw agent attempts as admitted (source code, agent, trajectory, turn, origin file:line).",
    "grades": "Every current grade: the primary pass and the independent recheck, one row per attempt per pass.",
    "trajectories": "Multi-turn episodes ordered by turn with per-turn status and reward.",
    "revalidated": "Primary grade vs recheck per attempt: three-way labels, agreement, near-tie flags.",
    "splits": "Held-out-family split of every task (frozen manifest).",
    "ledger": "Every input row (attempt or quarantined) with exactly one terminal state.",
    "quarantine": "Rows that could not be admitted, with the reason.",
    "accounting": "Ledger totals, counts by status and grader seconds by phase.",
    "tasks": "Public task cards (no hidden sizes, no expert source) with their revisions.",
    "fingerprints": "Hardware fingerprints the grades were taken on.",
    # One config per split of the frozen held-out-family manifest: the training data as a lab uses it.
    "trajectories_train": "Trajectories on tasks of the manifest's train split.",
    "trajectories_validation": "Trajectories on tasks of the manifest's validation split.",
    "trajectories_test_heldout": "Trajectories on held-out families and lineages (never train on these).",
}
DEFAULT_CONFIG = "trajectories"
SHARD = "train-00000-of-00001.parquet"
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
SEALED_COLUMNS = ("hidden_sizes", "expert", "expert_source")


def shard_path(root: Path, config: str) -> Path:
    return root / "data" / config / SHARD


def export_configs(con: duckdb.DuckDBPyConnection, root: Path) -> dict[str, int]:
    """COPY each config's query to its parquet shard; returns rows per config."""
    rows = {}
    for config in CONFIGS:
        out = shard_path(root, config)
        out.parent.mkdir(parents=True, exist_ok=True)
        query = load_sql(f"release.{config}").rstrip().rstrip(";")
        copy_parquet(con, query, out, wide_rows=config == "attempts")  # bounded memory at 1M attempts
        rows[config] = int(scalar(con, "SELECT count(*) FROM read_parquet($path)", {"path": str(out)}))
    return rows


def sealed_problems(root: Path, catalogue: dict) -> list[dict[str, Any]]:
    """Anything sealed that reached the release: sealed columns, hidden size keys, expert source text."""
    problems: list[dict[str, Any]] = []
    hidden = {c.task_id: {size_key(s) for sizes in c.hidden_sizes.values() for s in sizes} for c in catalogue.values()}
    experts = [c.expert.strip() for c in catalogue.values() if len(c.expert.strip()) > 40]
    con = duckdb.connect()
    try:
        for config in CONFIGS:
            path = shard_path(root, config)
            if not path.is_file():
                problems.append({"config": config, "problem": "shard missing"})
                continue
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
    finally:
        con.close()
    return problems


def _size_category(n: int) -> str:
    """The Hub's size bucket for the largest config."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return name
    return "10M<n<100M"


def dataset_card(version: str, run_id: str, rows: dict[str, int], facts: dict[str, Any],
                 revalidation_md: str = "") -> str:
    """README.md with YAML front matter: Hub configs plus the identities that pin this release."""
    front = {
        "pretty_name": f"kerneltraj {version}",
        "license": "apache-2.0",
        "task_categories": ["text-generation", "reinforcement-learning"],
        "size_categories": [_size_category(max(rows.values(), default=0))],
        "tags": ["gpu-kernels", "triton", "reinforcement-learning", "code", "kerneltraj"],
        "configs": [{"config_name": c, "data_files": [{"split": "train", "path": f"data/{c}/train-*.parquet"}],
                     **({"default": True} if c == DEFAULT_CONFIG else {})} for c in CONFIGS],
        "kerneltraj": {"version": version, "dagster_run_id": run_id, **facts},
    }
    ledger = facts["accounting"].get("ledger", {})
    states = facts["accounting"].get("terminal_state", {})
    seconds = facts["accounting"].get("grader_seconds", {})
    body = [
        f"# kerneltraj {version}",
        "",
        "Graded GPU-kernel attempts by AI agents, for reinforcement learning. Every attempt was graded by the "
        "sealed kerneltraj grader (public and hidden sizes, fresh inputs, expert kernel timed in the same run) "
        "and rechecked independently with a new seed and fresh grader workers.",
        "",
        "## Configs",
        markdown_table([{"config": c, "rows": rows.get(c, 0), "what": d} for c, d in CONFIGS.items()], max_cell=120),
        "",
        "## Protocol",
        f"- Grader version `{facts['grader_version']}`; reward = log2(speedup vs expert), geometric mean over "
        f"sizes, clipped; {REWARD_FLOOR} for wrong, flagged or cheating kernels.",
        f"- Labels: faster / slower / tie from the ~95% interval of log2 speedup against a tie band of "
        f"{TIE_BAND_LOG2}; an interval across a band edge is `ambiguous`, never forced. A record is "
        "`revalidated` only when both grades agree on status and label.",
        "",
        "## Tasks",
        markdown_table([{"task_id": t, "revision": r} for t, r in sorted(facts["task_revisions"].items())]),
        "",
        "## Hardware",
        f"Devices: {md_escape(', '.join(facts['devices'])) or 'none'}; "
        f"fingerprints: {md_escape(', '.join(facts['fingerprint_ids']))}.",
        "",
        "## Accounting",
        f"{int(ledger.get('attempts_in', 0))} input rows, {int(ledger.get('unaccounted', 0))} unaccounted.",
        "",
        markdown_table([{"terminal_state": k, "rows": int(v)} for k, v in sorted(states.items())]),
        "",
        markdown_table([{"phase": k, "grader_seconds": round(v, 2)} for k, v in sorted(seconds.items())]),
        "",
        revalidation_md,
        "## Lineage",
        f"Produced by Dagster run `{run_id}`. Every grade row carries attempt_id, task_revision, grader_version "
        "and fingerprint_id; `kerneltraj lineage <attempt_id>` walks back to the raw file and line.",
        "",
    ]
    return front_matter_card(front, "\n".join(body))


def release_facts(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    ids = query_dicts(con, load_sql("release.identities"))[0]
    return {
        "grader_version": GRADER_VERSION,
        "task_revisions": {r["task_id"]: r["task_revision"] for r in query_dicts(con, load_sql("release.tasks"))},
        "fingerprint_ids": sorted(ids["fingerprint_ids"] or []),
        "devices": sorted(ids["devices"] or []),
        "profiles": sorted(ids["profiles"] or []),
        "tie_band_log2": TIE_BAND_LOG2,
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


@dg.asset(
    deps=["accounting", "trajectories", "revalidated_records", "revalidation_report", "family_splits"],
    group_name=GROUP_RELEASE,
    owners=[OWNER],
    kinds={"parquet", "duckdb"},
    code_version="1",
    description="A versioned dataset release: one parquet shard per config and a dataset card pinning the "
                "grader version, task revisions, hardware and the full attempt accounting. Sealed fields "
                "(hidden sizes, expert source) are never written.",
)
def release(context: AssetExecutionContext, warehouse: Warehouse, release_target: ReleaseTarget,
            attempt_sources: AttemptSources) -> dg.MaterializeResult:
    version = release_target.version
    if not _VERSION.match(version):
        raise ValueError(f"release version {version!r} must match {_VERSION.pattern}")
    run_id = context.run.run_id
    parent = resolve_path(release_target.releases_dir)
    parent.mkdir(parents=True, exist_ok=True)
    final = parent / version
    staging = parent / f".{version}.staging-{run_id[:8]}"
    if staging.exists():
        shutil.rmtree(staging)
    catalogue = load_catalogue(extra=[resolve_path(p) for p in attempt_sources.task_files])
    try:
        with warehouse.connect() as con:
            rows = export_configs(con, staging)
            facts = release_facts(con)
            revalidation_md = dataset_card_section(con)
        (staging / "README.md").write_text(dataset_card(version, run_id, rows, facts, revalidation_md))
        leaks = sealed_problems(staging, catalogue)
        if leaks:
            raise RuntimeError(f"sealed data reached the release; nothing published: {leaks[:5]}")
        swap_into_place(staging, final)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    digest = hashlib.sha256(b"".join(shard_path(final, c).read_bytes() for c in CONFIGS)).hexdigest()
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    with warehouse.connect() as con, transaction(con):
        run_script(con, "release.forget", {"version": version})
        run_script(con, "release.record", {"version": version, "path": str(final), "run_id": run_id,
                                           "created_at": now, "configs": json.dumps(rows)})
    context.log.info(f"release {version} written to {final}")
    return dg.MaterializeResult(metadata={
        "dagster/row_count": dg.MetadataValue.int(sum(rows.values())),
        "path": dg.MetadataValue.path(str(final)),
        "version": dg.MetadataValue.text(version),
        "content_sha256": dg.MetadataValue.text(digest),
        "preview": dg.MetadataValue.md(markdown_table([{"config": c, "rows": n} for c, n in rows.items()])),
        "dataset_card": dg.MetadataValue.md(card_body((final / "README.md").read_text())),
    })


def _latest_release(warehouse: Warehouse) -> dict[str, Any] | None:
    with warehouse.connect() as con:
        latest = query_dicts(con, load_sql("release.latest"))
    return latest[0] if latest else None


@dg.asset_check(asset=release, blocking=True,
                description="Every config's shard exists and holds as many rows as its warehouse query.")
def release_matches_warehouse(warehouse: Warehouse) -> dg.AssetCheckResult:
    latest = _latest_release(warehouse)
    if latest is None:
        return check_result([{"problem": "no release recorded"}], "missing releases")
    root = Path(latest["path"])
    bad = []
    with warehouse.connect() as con:
        for config in CONFIGS:
            path = shard_path(root, config)
            want = int(scalar(con, f"SELECT count(*) FROM ({load_sql(f'release.{config}').rstrip().rstrip(';')})"))
            got = (int(scalar(con, "SELECT count(*) FROM read_parquet($path)", {"path": str(path)}))
                   if path.is_file() else None)
            if got != want:
                bad.append({"config": config, "warehouse_rows": want, "parquet_rows": got})
    return check_result(bad, "configs whose shard does not match the warehouse", version=latest["version"])


@dg.asset_check(asset=release, blocking=True,
                description="No sealed field (hidden size keys, expert source, sealed card fields) is in the release.")
def sealed_fields_absent(warehouse: Warehouse, attempt_sources: AttemptSources) -> dg.AssetCheckResult:
    latest = _latest_release(warehouse)
    if latest is None:
        return check_result([{"problem": "no release recorded"}], "missing releases")
    catalogue = load_catalogue(extra=[resolve_path(p) for p in attempt_sources.task_files])
    return check_result(sealed_problems(Path(latest["path"]), catalogue), "sealed values in the release")


@dg.asset_check(asset=release, blocking=True,
                description="Every published grade and revalidated record carries attempt_id, task_revision, "
                            "grader_version and fingerprint_id.")
def published_records_carry_lineage(warehouse: Warehouse) -> dg.AssetCheckResult:
    latest = _latest_release(warehouse)
    if latest is None:
        return check_result([{"problem": "no release recorded"}], "missing releases")
    bad = []
    con = duckdb.connect()
    try:
        for config in ("grades", "revalidated"):
            path = shard_path(Path(latest["path"]), config)
            bad += [{"config": config, "attempt_id": r[0]} for r in con.execute(
                load_sql("release.missing_lineage"), {"path": str(path)}).fetchall()]
    finally:
        con.close()
    return check_result(bad, "published records without a lineage key")


CHECKS = [release_matches_warehouse, sealed_fields_absent, published_records_carry_lineage]
