"""The release's dataset card and the column descriptions its parquet files carry, from one description file.

`pipelines/reporting/dataset_card.yaml` describes every config, every column, the JSON-in-string columns and the licence
of every source corpus; `pipelines/reporting/dataset_card.md` is the card's template. Untrusted values (task ids, device
names, fingerprints) go through `md_escape` before they reach the template, and the front matter through
`front_matter_card`, so neither can add markup or a YAML key.
"""
from __future__ import annotations

import datetime as dt
import functools
import importlib.resources
import math
import re
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from grader.contract import REWARD_FLOOR, SPEEDUP_CLIP
from pipelines.core.markup import front_matter_card, md_escape
from pipelines.core.warehouse import markdown_table

OUR_SOURCE = "kerneltraj"
"""Our own corpus, catalogue and outputs: its licence applies to every release."""
DESCRIPTION_KEY = b"description"
"""Parquet/Arrow field-metadata key holding a column's description (what the Hub viewer and pyarrow read)."""
REVALIDATION_STATES = ("confirmed", "ambiguous", "disagreed", "recheck_failed", "not_rechecked")
"""Values of revalidation_state (turns, grades, revalidated, attempts): sql/rewards.sql maps the ledger's states."""
REWARD_KINDS = ("log2_speedup_vs_expert", "cpu_timing_not_a_speedup", "floor", "not_graded_here", "not_graded")
"""Values of reward_kind (turns, grades, revalidated): what a reward is where it was measured (sql/rewards.sql)."""


@functools.cache
def card_spec() -> dict[str, Any]:
    """pipelines/reporting/dataset_card.yaml, parsed once."""
    import yaml

    return yaml.safe_load(importlib.resources.files("pipelines.reporting").joinpath("dataset_card.yaml").read_text())


def configs() -> dict[str, dict[str, Any]]:
    """Published configs in card order: name -> {what, split_by_task}."""
    return card_spec()["configs"]


def describe(config: str, column: str) -> str | None:
    """A column's description: the config's own, else the common one; None when undescribed."""
    spec = card_spec()
    own = (spec["columns"].get(config) or {}).get(column)
    return own or spec["common"].get(column)


def column_problems(config: str, names: list[str]) -> list[str]:
    """Differences between a shard's columns and the declared ones, and declared columns with no description."""
    declared = list(card_spec()["columns"].get(config) or {})
    problems = []
    if names != declared:
        problems.append(f"{config}: published columns {names} differ from dataset_card.yaml {declared}")
    problems += [f"{config}.{c}: no description" for c in names if not describe(config, c)]
    return problems


def annotate_parquet(path: Path, config: str, batch_rows: int) -> None:
    """Rewrite `path` with each field's description in its Arrow field metadata, streaming row groups."""
    source = pq.ParquetFile(path)
    schema = source.schema_arrow
    problems = column_problems(config, schema.names)
    if problems:
        raise ValueError("; ".join(problems))
    fields = [f.with_metadata({DESCRIPTION_KEY: describe(config, f.name).encode()}) for f in schema]
    annotated = pa.schema(fields, metadata={b"kerneltraj_config": config.encode()})
    tmp = path.with_name(path.name + ".tmp")
    with pq.ParquetWriter(tmp, annotated, compression="zstd") as out:
        for batch in source.iter_batches(batch_size=batch_rows):
            out.write_table(pa.Table.from_batches([batch], schema=schema).cast(annotated),
                            row_group_size=batch_rows)
    source.close()
    tmp.replace(path)


def licences(sources: list[str]) -> list[dict[str, str]]:
    """Licence rows for the sources present, ours first; a source we hold no licence for says so."""
    known = card_spec()["sources"]
    rows = []
    for name in [OUR_SOURCE, *sorted(set(sources) - {OUR_SOURCE})]:
        s = known.get(name) or {"name": name, "license": "other", "upstream": "",
                                "attribution": "licence not declared to kerneltraj: the release builder must state it"}
        rows.append({"source": name, **s})
    return rows


def notice_text(sources: list[str]) -> str:
    """The release's NOTICE file: every source's attribution, then each upstream NOTICE verbatim."""
    parts = ["This release holds content from the following sources.", ""]
    for s in licences(sources):
        parts += [f"- {s['source']}: {s['attribution']} ({s['license']})"]
    for s in licences(sources):
        if s.get("notice"):
            parts += ["", f"NOTICE of {s['name']}:", "", s["notice"]]
    return "\n".join(parts) + "\n"


def code_commit() -> str:
    """The git commit of this code, with `-dirty` when the tree had changes; `unknown` outside a checkout."""
    where = str(importlib.resources.files("pipelines"))
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", where, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}-dirty" if dirty else head


def _hub_licence(rows: list[dict[str, str]]) -> str | list[str]:
    ids = list(dict.fromkeys(r["license"] for r in rows))
    return ids[0] if len(ids) == 1 else ids


def _size_category(n: int) -> str:
    """The Hub's size bucket for the largest config."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if n < limit:
            return name
    return "10M<n<100M"


def _columns_table(config: str, types: dict[str, str]) -> str:
    cols = card_spec()["columns"].get(config) or {}
    return markdown_table([{"column": c, "type": types.get(c, ""), "description": describe(config, c)}
                           for c in cols], max_cell=400)


def _fields_table(fields: dict[str, str], key: str = "field") -> str:
    return markdown_table([{key: k, "description": v} for k, v in fields.items()], max_cell=400)


def split_table(rows: dict[str, int], split_rows: dict[str, dict[str, int]]) -> str:
    """Rows per config per split (blank where a config has no such split), and in all."""
    table = []
    for name, c in configs().items():
        per = split_rows.get(name, {})
        names = ("train", "validation", "test_heldout") if c["split_by_task"] else ("full",)
        table.append({"config": name, **{s: per.get(s, "") for s in ("train", "validation", "test_heldout", "full")},
                      "rows": rows.get(name, sum(per.get(s, 0) for s in names))})
    return markdown_table(table)


def front_matter(version: str, run_id: str, rows: dict[str, int], facts: dict[str, Any],
                 data_files: dict[str, list[dict[str, str]]], default_config: str) -> dict[str, Any]:
    """The card's YAML front matter: Hub metadata, one config per table with its splits, and the pins."""
    return {
        "pretty_name": f"kerneltraj {version}",
        "license": _hub_licence(licences(facts.get("sources", []))),
        "task_categories": ["text-generation", "reinforcement-learning"],
        "size_categories": [_size_category(max(rows.values(), default=0))],
        "tags": ["gpu-kernels", "triton", "reinforcement-learning", "code", "kerneltraj"],
        "configs": [{"config_name": c, "data_files": data_files[c],
                     **({"default": True} if c == default_config else {})} for c in configs() if c in data_files],
        "kerneltraj": {"version": version, "dagster_run_id": run_id, **facts},
    }


def render_card(version: str, run_id: str, rows: dict[str, int], facts: dict[str, Any], *,
                data_files: dict[str, list[dict[str, str]]], default_config: str,
                split_rows: dict[str, dict[str, int]] | None = None, types: dict[str, dict[str, str]] | None = None,
                revalidation_md: str = "") -> str:
    """README.md of a release: front matter plus the body rendered from pipelines/reporting/dataset_card.md."""
    import jinja2

    spec, types, split_rows = card_spec(), types or {}, split_rows or {}
    manifest = facts.get("split_manifest") or {}
    accounting = facts.get("accounting") or {}
    ledger = accounting.get("ledger", {})
    backends = facts.get("backends") or []
    src = licences(facts.get("sources", []))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True)
    template = env.from_string(importlib.resources.files("pipelines.reporting").joinpath("dataset_card.md").read_text())
    body = template.render(
        version=md_escape(version), version_key=re.sub(r"\W", "_", version), run_id=md_escape(run_id),
        default_config=default_config, cpu_backend="cpu" in backends,
        backends=md_escape(", ".join(backends)) or "no grades",
        manifest={"version": md_escape(manifest.get("version", "none")),
                  "sha256": md_escape(manifest.get("sha256", "none")),
                  "families": md_escape(", ".join(manifest.get("held_out_families", []))) or "none",
                  "lineages": md_escape(", ".join(manifest.get("held_out_lineages", []))) or "none",
                  "validation_pct": round(100 * manifest.get("validation_fraction", 0.0))},
        split_table=split_table(rows, split_rows),
        clip_lo=f"1/{round(1 / SPEEDUP_CLIP[0])}", clip_hi=f"{SPEEDUP_CLIP[1]:g}",
        reward_min=f"{math.log2(SPEEDUP_CLIP[0]):g}", reward_max=f"{math.log2(SPEEDUP_CLIP[1]):g}",
        floor=f"{REWARD_FLOOR:g}", grader_version=md_escape(facts.get("grader_version")),
        tie_band=facts.get("tie_band_log2"), revalidation_states=", ".join(f"`{s}`" for s in REVALIDATION_STATES),
        config_table=markdown_table([{"config": c, "rows": rows.get(c, 0), "what": d["what"]}
                                     for c, d in configs().items()], max_cell=200),
        configs=[{"name": c, "what": d["what"], "columns": _columns_table(c, types.get(c, {}))}
                 for c, d in configs().items()],
        turn_fields=_fields_table(spec["turn_fields"]),
        json_columns=[{"name": n, "config": j["config"], "shape": j["shape"],
                       "fields": _fields_table(j["fields"], "key") if j["fields"] else "Each element is a string."}
                      for n, j in spec["json_columns"].items()],
        source_table=markdown_table([{"source": s["source"], "licence": s["license"], "attribution": s["attribution"],
                                      "upstream": s["upstream"]} for s in src], max_cell=400),
        notices=[s for s in src if s.get("notice")],
        task_table=markdown_table([{"task_id": t, "revision": r}
                                   for t, r in sorted((facts.get("task_revisions") or {}).items())]),
        devices=md_escape(", ".join(facts.get("devices", []))) or "none",
        fingerprints=md_escape(", ".join(facts.get("fingerprint_ids", []))),
        attempts_in=int(ledger.get("attempts_in", 0)), unaccounted=int(ledger.get("unaccounted", 0)),
        terminal_table=markdown_table([{"terminal_state": k, "rows": int(v)}
                                       for k, v in sorted(accounting.get("terminal_state", {}).items())]),
        seconds_table=markdown_table([{"phase": k, "grader_seconds": round(v, 2)}
                                      for k, v in sorted(accounting.get("grader_seconds", {}).items())]),
        revalidation_md=revalidation_md, code_commit=md_escape(facts.get("code_commit", "unknown")),
        year=dt.date.today().year,
    )
    return front_matter_card(front_matter(version, run_id, rows, facts, data_files, default_config), body)
