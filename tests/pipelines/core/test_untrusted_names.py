"""Untrusted names reach no markup: ingest refuses them, and every render escapes what got in anyway.

Agent and model names outside the safe set are quarantined (`bad_name`, naming the field) by the real
ingest, fast path and per-line parser alike; file names, kept in `origin`, are escaped wherever a
table renders them. A second attempt at one (trajectory, turn) is quarantined (`duplicate_turn`,
naming the attempt that holds the turn), so the trajectories' blocking gate passes. Real DuckDB, a
real Dagster instance; Markdown is rendered by markdown-it (Dagster's `rich` ships it) with raw HTML
on and every link target allowed, as a permissive renderer would.
"""
from __future__ import annotations

import html
import json
import re
import tempfile
from pathlib import Path

import dagster as dg
import pytest
import yaml
from markdown_it import MarkdownIt

from assets import ingest, trajectories
from pipelines.grading.passes import PASS_PRIMARY, commit_grades, grade_row
from pipelines.publishing.release_files import dataset_card
from grader.contract import GRADER_VERSION, REWARD_FLOOR, GradeResult, Reason, Status
from pipelines.importers import admit
from pipelines.core.markup import card_body, md_escape
from pipelines.defs.quality import validate_table
from pipelines.core.rawattempt import _NAME, Quarantined
from pipelines.grading.backend import GradeOutcome
from pipelines.defs.resources import AttemptSources, Warehouse
from pipelines.core.warehouse import connect, load_sql, markdown_table, query_dicts, run_script, scalar

HOSTILE = {
    "script": "<script>alert(1)</script>",
    "pipe": "a|b",
    "front_matter": "x\n---\npretty_name: pwned\n---",
    "js_link": "[click](javascript:alert(1))",
    "js_autolink": "<javascript:alert(1)>",
    "js_image": "![i](javascript:alert(1))",
    "html_comment": "<!-- x",
    "markdown": "`code` *em* ~~gone~~ \\| \\",
    "entity": "&lt;script&gt;",
}


def render(markdown: str) -> str:
    md = MarkdownIt("commonmark", {"html": True}).enable("table").enable("strikethrough")
    md.validateLink = lambda url: True  # a permissive renderer: javascript: targets are not dropped for us
    return md.render(markdown)


def _cells(rendered: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]*>", "", c)) for c in re.findall(r"<td>(.*?)</td>", rendered, re.S)]


# ---- the escaping helper ---------------------------------------------------------------------------

def test_md_escape_on_the_named_threats() -> None:
    assert md_escape("<script>alert(1)</script>") == "&lt;script>alert(1)&lt;/script>"
    assert md_escape("a|b") == "a\\|b"
    assert md_escape("x\n---\ny") == "x --- y"
    assert md_escape("[x](javascript:alert(1))") == "\\[x\\](javascript:alert(1))"
    assert md_escape(None) == "" and md_escape(3) == "3"


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_escaped_text_renders_as_itself_in_one_cell(kind: str) -> None:
    value = HOSTILE[kind]
    table = f"| name | n |\n|---|---|\n| {md_escape(value)} | 1 |\n"
    out = render(table)
    assert not re.search(r"<(script|a|img|hr|h\d|del|em|strong|code)\b|<!--", out), out
    assert _cells(out) == [value.replace("\n", " "), "1"], out


def test_markdown_table_escapes_headers_cells_and_cuts_before_escaping() -> None:
    rows = [{"agent<b>": HOSTILE["script"] * 5, "origin": "runs/<img src=x>|x.jsonl:3", "model": HOSTILE["js_link"]}]
    out = render(markdown_table(rows, max_cell=30))
    assert "<b>" not in out and "<img" not in out and "<script" not in out and "<a " not in out
    cells = _cells(out)
    assert len(cells) == 3 and cells[0] == (HOSTILE["script"] * 5)[:29] + "…"
    assert cells[1] == "runs/<img src=x>|x.jsonl:3" and cells[2] == HOSTILE["js_link"]
    assert md_escape("&<&<", max_chars=3) == "&amp;&lt;…"  # cut first: no entity is cut in half


def test_dataset_card_front_matter_and_body_hold_hostile_values() -> None:
    facts = {"grader_version": GRADER_VERSION, "task_revisions": {"t\n---\nlicense: mit": "r1"},
             "devices": [HOSTILE["front_matter"], HOSTILE["script"]], "fingerprint_ids": [HOSTILE["pipe"]],
             "profiles": ["cpu"], "tie_band_log2": 0.05,
             "accounting": {"ledger": {"attempts_in": 2, "unaccounted": 0}, "terminal_state": {"quarantined": 2},
                            "grader_seconds": {}}}
    card = dataset_card("v1", "run-1", {"attempts": 0}, facts)
    front = yaml.safe_load(card.split("\n---\n", 1)[0].removeprefix("---\n"))
    assert front["license"] == "apache-2.0" and front["kerneltraj"]["devices"] == facts["devices"]
    assert front["kerneltraj"]["task_revisions"] == facts["task_revisions"]
    body = card_body(card)
    assert body.startswith("# kerneltraj v1") and not any(ln.strip() == "---" for ln in body.splitlines())
    assert "<script" not in render(body)
    assert "Devices: x --- pretty_name: pwned ---, &lt;script>alert(1)&lt;/script>; fingerprints: a\\|b." in body


# ---- ingest ---------------------------------------------------------------------------------------

def test_sql_name_pattern_is_the_parsers() -> None:
    """The fast path's name regex is a literal in sql/ingest.sql; it must be pipelines.core.rawattempt._NAME."""
    sql = load_sql("ingest.admissible")
    assert sql.count(f"'{_NAME.pattern.removeprefix('^').removesuffix('$')}'") == 2


def _row(n: int, **changes) -> dict:
    return {"attempt_id": f"hostile.a{n}", "task_id": "gelu_fp32", "agent": "kestrel", "model": "talon-coder-70b",
            "trajectory_id": f"hostile.t{n}", "turn": 1, "language": "pytorch",
            "source": "import torch\n\ndef run(x):\n    return torch.nn.functional.gelu(x)\n", **changes}


NAMED = [("agent", HOSTILE["script"]), ("model", HOSTILE["pipe"]), ("model", HOSTILE["front_matter"]),
         ("agent", "javascript:alert(1)"), ("model", "JavaScript:void"), ("agent", HOSTILE["js_link"]),
         ("model", "data:text/html,x"), ("agent", " leading-space"), ("model", "késtrel")]
SAFE = [("agent", "openhands"), ("model", "Qwen/Qwen2.5-Coder-32B-Instruct"), ("model", "qwen2.5-coder:32b"),
        ("model", "claude-3-5-sonnet@20240620"), ("agent", "kes trel"), ("model", "Claude 3.5 Sonnet (new)")]


def _ingest(instance, wh: Warehouse, *paths: Path) -> dg.ExecuteInJobResult:
    result = dg.materialize([ingest.raw_attempts, *ingest.CHECKS], instance=instance, resources={
        "warehouse": wh, "attempt_sources": AttemptSources(paths=[str(p) for p in paths])})
    assert result.success
    assert all(e.passed for e in result.get_asset_check_evaluations())
    return result


@pytest.fixture()
def short_dir():
    """A directory with a short path, so a file name in it still shows in a preview cell (40 characters)."""
    with tempfile.TemporaryDirectory(prefix="kt", dir="/tmp") as d:
        yield Path(d)


def test_hostile_names_are_quarantined_naming_the_field_and_origins_are_escaped(instance, tmp_path,
                                                                                 short_dir) -> None:
    rows = [_row(i, **{field: value}) for i, (field, value) in enumerate(NAMED)]
    rows += [_row(100 + i, **{field: value}) for i, (field, value) in enumerate(SAFE)]
    # A file name that is markup: it is kept in `origin` and shown in the ingest preview.
    path = short_dir / "<img src=x>|[a](javascript:b)"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    wh = Warehouse(path=str(tmp_path / "w.duckdb"))
    result = _ingest(instance, wh, path)
    with connect(wh.path) as con:
        bad = {r["attempt_id"]: r for r in query_dicts(con, "SELECT * FROM quarantine")}
        admitted = {r[0] for r in con.execute("SELECT attempt_id FROM raw_attempts").fetchall()}
        states = dict(con.execute("SELECT terminal_state, count(*) FROM ledger WHERE ledger_source = 'quarantine' "
                                  "GROUP BY 1").fetchall())
    assert admitted == {f"hostile.a{100 + i}" for i in range(len(SAFE))}
    assert set(bad) == {f"hostile.a{i}" for i in range(len(NAMED))} and states == {"quarantined": len(NAMED)}
    for i, (field, _) in enumerate(NAMED):
        q = bad[f"hostile.a{i}"]
        assert q["reason_code"] == "bad_name" and f": {field} must match" in q["reason"], q
    preview = result.asset_materializations_for_node("raw_attempts")[0].metadata["preview"].value
    out = render(preview)
    assert "<img" not in out and "<a " not in out
    cells = _cells(out)
    assert len(cells) == 8 * len(SAFE)  # no pipe of a file name added a column
    origins = [f"{path}:{len(NAMED) + i + 1}" for i in range(len(SAFE))]
    assert sorted(cells[7::8]) == sorted(o[:39] + "…" if len(o) > 40 else o for o in origins)
    assert all("<img src=x>|[a]" in c for c in cells[7::8])


def test_importers_refuse_hostile_names_through_the_shared_admission() -> None:
    for i, (field, value) in enumerate(NAMED):
        verdict = admit(_row(i, **{field: value}), f"corpus.jsonl:{i}", b"{}", set())
        assert isinstance(verdict, Quarantined) and verdict.reason_code == "bad_name", verdict
    assert not isinstance(admit(_row(99), "corpus.jsonl:99", b"{}", set()), Quarantined)


# ---- one attempt per trajectory turn ----------------------------------------------------------------

def _grade_every_attempt(wh: Warehouse) -> None:
    with connect(wh.path) as con:
        run_script(con, "grading.set_version", {"grader_version": GRADER_VERSION})
        pending = query_dicts(con, load_sql("grading.pending_primary"), {"grader_version": GRADER_VERSION})
    rows = []
    for p in pending:
        result = GradeResult(attempt_id=p["attempt_id"], task_id=p["task_id"], task_revision=p["task_revision"],
                             grader_version=GRADER_VERSION, status=Status.WRONG_OUTPUT, reason_code=Reason.MISMATCH,
                             reason="element (0, 0) outside tolerance", reward=REWARD_FLOOR, seed=1, profile="cpu",
                             device="cpu", fingerprint_id="fp1", fingerprint={"kind": "cpu"},
                             phase_seconds={"total": 0.1})
        rows.append(grade_row(GradeOutcome(result, tries=1, retry_s=0.0), PASS_PRIMARY, p["source_sha256"],
                              "run-1", None))
    commit_grades(wh, rows, {"fp1": {"kind": "cpu"}}, "run-1")


def _trajectory_checks(instance, wh: Warehouse) -> dict[str, bool]:
    result = dg.materialize([trajectories.trajectories, *trajectories.CHECKS], instance=instance,
                            resources={"warehouse": wh}, raise_on_error=False)
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def test_duplicate_turns_are_quarantined_and_the_blocking_gate_passes(instance, tmp_path) -> None:
    turn = {"trajectory_id": "hostile.traj", "turn": 2}
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text("".join(json.dumps(r) + "\n" for r in [
        _row(1, trajectory_id="hostile.traj", turn=1), _row(2, **turn), _row(3, **turn)]))
    # In a second file, and on the per-line parser's path (an unknown key keeps it off the fast path).
    two.write_text(json.dumps({**_row(4, **turn), "note": "x"}) + "\n" + json.dumps(_row(5, **turn)) + "\n")
    wh = Warehouse(path=str(tmp_path / "w.duckdb"))
    _ingest(instance, wh, one, two)
    with connect(wh.path) as con:
        dup = query_dicts(con, load_sql("ingest.quarantine_rows"), {"reason": "duplicate_turn"})
        kept = [r[0] for r in con.execute("SELECT attempt_id FROM raw_attempts ORDER BY 1").fetchall()]
        ledger = query_dicts(con, "SELECT attempt_id, terminal_state FROM ledger ORDER BY origin")
        counts = query_dicts(con, "SELECT path, accepted, quarantined FROM input_files ORDER BY path")
        assert scalar(con, "SELECT count(*) FROM (" + load_sql("trajectories.repeated_turns").rstrip().rstrip(";")
                      + ")") == 0
    assert kept == ["hostile.a1", "hostile.a2"]
    assert [(r["attempt_id"], r["origin"]) for r in dup] == [
        ("hostile.a3", f"{one}:3"), ("hostile.a4", f"{two}:1"), ("hostile.a5", f"{two}:2")]
    for r in dup:
        assert "turn 2 of trajectory hostile.traj is already held by attempt hostile.a2" in r["reason"], r
        assert r["reason"].startswith(f"{r['attempt_id']}: ")
    # Every raw attempt in exactly one terminal state the ledger shows; per-file counts add up.
    assert sorted(r["attempt_id"] for r in ledger) == [f"hostile.a{i}" for i in range(1, 6)]
    assert [r["terminal_state"] for r in ledger if r["attempt_id"] in {"hostile.a3", "hostile.a4", "hostile.a5"}] \
        == ["quarantined"] * 3
    assert [(r["accepted"], r["quarantined"]) for r in counts] == [(2, 1), (0, 2)]

    _grade_every_attempt(wh)
    assert _trajectory_checks(instance, wh) == {
        "every_attempt_in_one_trajectory": True, "trajectory_summaries_consistent": True,
        "trajectories_well_formed": True, "quality_gate": True}

    # The control: the same duplicate admitted (as before) is what the blocking gate stops the release on.
    with connect(wh.path) as con:
        con.execute("INSERT INTO raw_attempts SELECT * REPLACE ('hostile.a3' AS attempt_id) FROM raw_attempts "
                    "WHERE attempt_id = 'hostile.a2'")
    _grade_every_attempt(wh)
    checks = _trajectory_checks(instance, wh)
    assert checks["quality_gate"] is False and checks["trajectories_well_formed"] is False
    with connect(wh.path) as con:
        frame = con.execute(load_sql("release.trajectories")).df()
    failed = validate_table("trajectories", frame).failed
    assert [(e, c) for e, c, _ in failed] == [("expect_compound_columns_to_be_unique", "turns")], failed
