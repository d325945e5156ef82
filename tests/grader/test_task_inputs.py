"""Tasks whose inputs only their own `get_inputs()` can make (issue #15).

Where a KernelBench task's inputs cannot be re-expressed as seeded draws plus steps (`grader.inputs`), the
importer no longer refuses it: its card says `inputs_from="task"`, and a grade runs the task's `get_inputs()`
in the task's sandboxed reference worker under a generator seeded per call, at the task's own size. The
parent hands the same sealed tensors to the candidate and the expert, checks that a call left them as they
were, and checks that the reference, making them again for the answer, made the same ones.
"""
from __future__ import annotations

import json

import pytest

from grader.contract import REWARD_FLOOR, GradeRequest, Reason, Status
from tests.conftest import REPO_ROOT

CASES_DIR = REPO_ROOT / "tests" / "fixtures" / "own_inputs"
CASES = json.loads((CASES_DIR / "cases.json").read_text())
KEYS = {tuple(map(int, k.split(":"))): (CASES_DIR / f).read_text() for k, f in CASES["tasks"].items()}
"""(level, problem) -> task source: rotations by orthonormal matrices (QR of a draw, two values unpacked, which no
step of grader.inputs expresses), the same with inputs that depend on the clock, and a gather by a permutation."""
ATTEMPTS = {name: (tuple(map(int, key.split(":"))), (CASES_DIR / f).read_text(), Status(st), Reason(code))
            for name, (key, f, st, code) in CASES["attempts"].items()}


def _tid(key):
    return f"kernelbench_L{key[0]}_{key[1]:03d}"


@pytest.fixture(scope="module")
def cards():
    from pipelines.importers.kernelbench import build_cards

    return build_cards(KEYS)


@pytest.fixture(scope="module")
def graded(cards, tmp_path_factory):
    from grader.service import GraderService
    from pipelines.importers import write_cards

    catalogue = tmp_path_factory.mktemp("own_inputs") / "cards.jsonl"
    write_cards(list(cards.values()), catalogue)
    reqs = [GradeRequest(attempt_id=name, task_id=_tid(key), source=src, language="pytorch", entry_point="ModelNew",
                         profile="cpu", timeout_s=120) for name, (key, src, _, _) in ATTEMPTS.items()]
    with GraderService(mode="zygote", workers=1, device="cpu", catalogue_extra=[str(catalogue)]) as svc:
        return {r.attempt_id: r for r in svc.grade(reqs)}


def test_the_importer_keeps_the_task_and_says_how_its_inputs_are_made(cards):
    for key in KEYS:
        card = cards[key]
        assert not isinstance(card, Exception), f"{key} refused: {card}"
        assert card.inputs_from == "task"
        assert card.hidden_sizes == {}, "a task's own get_inputs has one size: no hidden sizes"
        assert "own get_inputs" in card.hidden_sizes_note
    specs = cards[(1, 901)].inputs
    assert [(s.shape, s.dtype, s.dist) for s in specs[:2]] == [((8, 16, 16), "float32", "task"),
                                                              ((8, 16), "float32", "task")]
    assert (specs[2].dist, specs[2].low) == ("scalar", 0.5)
    assert [(s.shape, s.dtype) for s in cards[(1, 903)].inputs] == [((32, 8), "float32"), ((32,), "int64")]
    assert cards[(1, 901)].init_inputs == "[2.0]"


def test_an_expressible_task_keeps_its_drawn_inputs():
    from pipelines.importers.kernelbench import analyse_module

    task = KEYS[(1, 901)]
    plain = task.replace("    q, _ = torch.linalg.qr(torch.randn(batch, n, n))\n", "    q = torch.randn(batch, n, n)\n")
    assert analyse_module(plain).own_inputs == ""
    assert "Assign" in analyse_module(task).own_inputs  # the reason the draw could not be read is kept


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ATTEMPTS))
def test_each_attempt_gets_its_verdict_on_the_tasks_own_inputs(graded, name):
    r, (_, _, status, code) = graded[name], ATTEMPTS[name]
    assert (r.status, r.reason_code) == (status, code), r.reason
    if status is Status.CORRECT:
        assert r.reward > REWARD_FLOOR and r.sizes and not any(s.hidden for s in r.sizes)
    else:
        assert r.reward == REWARD_FLOOR


def test_inputs_no_seed_can_make_again_are_named_not_blamed_on_the_attempt(graded):
    assert "get_inputs made other inputs for the same seed" in graded["unseeded"].reason, graded["unseeded"].reason
