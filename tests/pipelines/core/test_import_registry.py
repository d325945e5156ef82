"""The import registry: imports keyed by format and source files, merged task cards, removal."""
from __future__ import annotations

import json
from pathlib import Path

from grader.catalogue import load_catalogue
from pipelines.core import import_registry as reg
from pipelines.core.settings import Settings


def _card(task_id: str, description: str = "d") -> dict:
    """A minimal card the catalogue accepts (the shape `dataclasses.asdict(TaskCard)` writes)."""
    return {"task_id": task_id, "family": "gemm", "lineage": "kernelbench/L1", "description": description,
            "inputs": [{"name": "x", "shape": ["N"], "dtype": "float32"}], "output_shape": ["N"],
            "output_dtype": "float32", "reference": "def run(x):\n    return x\n",
            "expert": "def run(x):\n    return x\n", "public_sizes": {"gpu": [{"N": 8}]},
            "hidden_sizes": {"gpu": [{"N": 16}]}, "expert_kind": "library", "bytes_moved": "N*4 + N*E"}


def _rows(aids: list[str], cards: list[dict]) -> dict:
    return {"attempts": [{"attempt_id": a, "task_id": c["task_id"]} for a, c in zip(aids, cards)],
            "tasks": cards}


def test_two_files_of_one_corpus_are_two_imports(tmp_path: Path) -> None:
    state = tmp_path / "state"
    h100, a100 = tmp_path / "h100.jsonl", tmp_path / "a100.jsonl"
    first, replaced = reg.record(state, "cuda-l1", [h100], _rows(["cuda-l1:h100:L1:T1"], [_card("kb_1")]))
    assert not replaced and first.import_id.startswith("cuda-l1/h100-")
    second, replaced = reg.record(state, "cuda-l1", [a100], _rows(["cuda-l1:a100:L1:T1"], [_card("kb_1")]))
    assert not replaced and second.import_id != first.import_id
    assert [e.import_id for e in reg.entries(state)] == sorted([first.import_id, second.import_id])
    settings = Settings.from_env({"KERNELTRAJ_STATE_DIR": str(state)})
    assert {first.files["attempts"], second.files["attempts"]} <= set(settings.inputs)
    # one card per task id over both imports, or the catalogue would refuse it as defined twice
    assert settings.task_files == (str(state / "imports" / "tasks.jsonl"),)
    assert "kb_1" in load_catalogue(list(settings.task_files))

    again, replaced = reg.record(state, "cuda-l1", [h100], _rows(["cuda-l1:h100:L1:T1"], [_card("kb_1")]))
    assert replaced and again.import_id == first.import_id and len(reg.entries(state)) == 2


def test_conflicting_cards_and_repeated_attempts_are_found(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first, _ = reg.record(state, "cuda-l1", [tmp_path / "h100.jsonl"], _rows(["a1"], [_card("kb_1")]))
    other = reg.import_id("kernelbench", [tmp_path / "runs"])
    assert reg.card_conflicts(state, [_card("kb_1")], other) == []
    assert reg.card_conflicts(state, [_card("kb_1", "another program")], other) == [("kb_1", first.import_id)]
    assert reg.card_conflicts(state, [_card("kb_1", "another program")], first.import_id) == []
    assert reg.attempt_overlap(state, {"a1", "a2"}, other) == {first.import_id: 1}
    assert reg.known_task_ids(state, other) == {"kb_1"} and reg.known_task_ids(state, first.import_id) == set()


def test_remove_drops_the_files_and_the_cards_only_it_brought(tmp_path: Path) -> None:
    state = tmp_path / "state"
    keep, _ = reg.record(state, "cuda-l1", [tmp_path / "h100.jsonl"], _rows(["a1"], [_card("kb_1")]))
    drop, _ = reg.record(state, "cuda-l1", [tmp_path / "a100.jsonl"], _rows(["a2", "a3"], [_card("kb_1"),
                                                                                          _card("kb_2")]))
    gone = reg.remove(state, drop.import_id)
    assert gone.import_id == drop.import_id and not Path(drop.files["attempts"]).parent.exists()
    assert [e.import_id for e in reg.entries(state)] == [keep.import_id]
    merged = [json.loads(line)["task_id"] for line in (state / "imports" / "tasks.jsonl").read_text().splitlines()]
    assert merged == ["kb_1"]


def test_a_registry_from_before_keyed_imports_still_reads(tmp_path: Path) -> None:
    """Imports made when the registry was keyed by format alone keep feeding the release."""
    state = tmp_path / "state"
    folder = state / "imports" / "cuda-l1"
    folder.mkdir(parents=True)
    files = {k: str(folder / f"{k}.jsonl") for k in ("attempts", "quarantine", "tasks")}
    for f in files.values():
        Path(f).write_text("")
    (state / "imports" / "registry.json").write_text(json.dumps({"cuda-l1": {**files, "sources": ["/x.jsonl"]}}))
    (only,) = reg.entries(state)
    assert only.import_id == "cuda-l1" and only.format == "cuda-l1" and only.sources == ("/x.jsonl",)
    assert reg.files_by_kind(state) == {"attempts": (files["attempts"],), "quarantine": (files["quarantine"],),
                                        "tasks": (files["tasks"],)}
    reg.remove(state, "cuda-l1")
    assert reg.entries(state) == [] and not Path(files["attempts"]).exists()
