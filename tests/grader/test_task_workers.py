"""One kept worker a task for its expert twin and its reference (`GraderService(task_workers=True)`, the default since
grader 0.21.0; `Slot.task`): one CUDA start and one device context a new task instead of two, only for a task whose
expert and reference come from one author (`SealedTask.one_author`). Real zygotes and workers on the CPU."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from grader.catalogue import load_catalogue
from grader.contract import GradeRequest, Status
from grader.session import SealedTask

ROOT = os.geteuid() == 0

GELU = ("import math, torch\n"
        "def run(x):\n"
        "    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))\n")

# Module state that moves to float64 once the module is called on float64 inputs, as KernelBench's adapter casts its
# model in place (grader/adapters.py): the expert and the reference loaded as one module would time the expert in
# float64 after the reference's first answer.
CASTS_ITSELF = ("import torch\n"
                "_scale = torch.full((1,), 2.0)\n"
                "def run(x):\n"
                "    global _scale\n"
                "    if x.dtype == torch.float64:\n"
                "        _scale = _scale.double()\n"
                "    return x * _scale\n")


def test_one_author_is_a_built_in_card_as_built_or_a_card_whose_expert_is_its_reference():
    card = load_catalogue()["gelu_fp32"]
    assert card.expert != card.reference
    assert SealedTask(card, "cpu").one_author  # ours, both
    assert not SealedTask(dataclasses.replace(card, task_id="imported_gelu"), "cpu").one_author
    assert SealedTask(dataclasses.replace(card, task_id="imported_gelu", expert=card.reference), "cpu").one_author
    # a card under a built-in id that is not the built-in card (its revision differs) is not ours
    assert not SealedTask(dataclasses.replace(card, description="changed"), "cpu").one_author


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """One slot with task workers, and beside the catalogue a card of two authors: the built-in gelu's expert with a
    reference of another's (an importer's card whose expert is not its reference)."""
    from grader.service import GraderService

    card = load_catalogue()["gelu_fp32"]
    cards = tmp_path_factory.mktemp("two_authors") / "cards.jsonl"
    cards.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(card, task_id="two_authors_gelu"))) + "\n")
    with GraderService(workers=1, task_workers=True, catalogue_extra=[str(cards)]) as svc:
        yield svc


def test_a_task_worker_answers_for_the_reference_in_its_arena_and_times_the_expert_apart(service):
    """The reference is a module of its own: its answers in float64 leave the expert's state alone, the expert's
    fetch comes through a memfd and leaves the reference's answer in the arena as it was."""
    import torch

    from grader import wire
    from grader.inputs import make_inputs

    slot = service.slots[0]
    specs = [{"shape": [8, 64], "dtype": "float32", "dist": "normal", "mean": [0.5, 0.5], "std": [1, 1],
              "low": 0.0, "high": 1.0}]
    conn = slot.task("casts@1", CASTS_ITSELF, CASTS_ITSELF, None, 60.0, answer_bytes=1 << 20)
    try:
        assert conn.role == "task" and slot.live[conn.pid] == "task" and slot._kept["task:casts@1"] is conn
        assert conn.arena is not None
        x = make_inputs(specs, 7, service.device)[0]
        ref, _, _ = conn.request({"op": "reference", "specs": specs, "seed": 7, "task_inputs": False, "key": "a"},
                                 60.0)
        assert ref["ok"] and ref["arena"] is True, ref
        answer = conn.arena.read(ref["tensors"], "cpu")[0]
        assert answer.dtype == torch.float64 and torch.allclose(answer, 2.0 * x.double().cpu())
        call, _, _ = conn.request({"op": "call", "specs": specs, "seed": 7, "out_nbytes": 8 * 64 * 4,
                                   "keep_inputs": False, "tag": "check", "trace": False, "gated": False}, 60.0)
        assert call["ok"], call
        got, _, _ = conn.request({"op": "fetch", "idx": call["idx"], "with_inputs": False}, 60.0)
        assert got["ok"] and got.get("arena") is not True and got.get("_fd"), got
        out = wire.tensors_from_memfd(got["tensors"], wire.recv_fd(conn.sock), "cpu")[0]
        assert out.dtype == torch.float32 and torch.allclose(out, 2.0 * x.cpu())
        assert torch.equal(conn.arena.read(ref["tensors"], "cpu")[0], answer)
    finally:  # the expert's role and the reference's end the same worker
        slot.drop_reference("casts@1")
        assert "task:casts@1" not in slot._kept and conn.pid not in slot.live


@pytest.mark.slow
def test_a_task_of_one_author_grades_with_one_worker_and_one_of_two_with_two(service):
    """The same attempts, right and wrong, on the built-in gelu (one author: one worker) and on a card whose reference
    is another's (two workers, under two uids, as before): the same verdicts, and each grade says which it had."""
    got = {}
    for task in ("gelu_fp32", "two_authors_gelu"):
        right = GradeRequest(attempt_id=f"right_{task}", task_id=task, source=GELU, language="pytorch")
        wrong = GradeRequest(attempt_id=f"wrong_{task}", task_id=task, source=GELU.replace("0.5 *", "0.49 *"),
                             language="pytorch")
        got[task] = sorted(service.grade([right, wrong]), key=lambda r: r.attempt_id)
    kept = {n.split(":")[0]: n.split(":", 1)[1] for n in service.slots[0]._kept}
    assert kept == {"task": service.task("gelu_fp32").expert_key,
                    "expert": service.task("two_authors_gelu").expert_key,
                    "reference": service.task("two_authors_gelu").expert_key}, kept
    for task, one in (("gelu_fp32", True), ("two_authors_gelu", False)):
        assert [r.status for r in got[task]] == [Status.CORRECT, Status.WRONG_OUTPUT], \
            [(r.status, r.reason) for r in got[task]]
        assert all(r.sandbox["task_worker"] is one for r in got[task]), task


@pytest.mark.skipif(not ROOT, reason="the sandbox's namespaces and uids need root")
def test_a_hostile_reference_in_a_task_worker_defines_no_task(tmp_path):
    """A card whose expert is its reference (one author: an import's), and that module reaches outside its sandbox
    when loaded: what its expert's load reported is not judged (as an expert worker's is not), its reference's load
    fails the worker's start, and the grade is the grader's (infra_error), never the candidate's."""
    from grader.service import GraderService

    reach = "try:\n    open('/root/.bashrc').read()\nexcept OSError:\n    pass\n"
    card = dataclasses.replace(load_catalogue()["gelu_fp32"], task_id="reaching_gelu", reference=reach + GELU,
                               expert=reach + GELU)
    cards = tmp_path / "cards.jsonl"
    cards.write_text(json.dumps(dataclasses.asdict(card)) + "\n")
    with GraderService(workers=1, catalogue_extra=[str(cards)], task_workers=True) as svc:
        assert svc.task("reaching_gelu").one_author
        r = svc.grade_one(GradeRequest(attempt_id="h", task_id="reaching_gelu", source=GELU, language="pytorch"))
        assert not svc.slots[0]._kept
    assert r.status is Status.INFRA_ERROR and "reference" in r.reason, (r.status, r.reason)


@pytest.mark.skipif(not ROOT, reason="the sandbox's namespaces and uids need root")
def test_what_the_expert_of_a_task_worker_reports_is_not_held_against_its_reference(tmp_path):
    """The same module, loaded as the expert (module `candidate`) and as the reference (module `reference`), reaches
    outside its sandbox only as the expert: an expert worker's audit lines are not judged, so neither are the task
    worker's before its reference's load and answers (`WorkerConn.answer_audit_mark`), and the grade is the
    candidate's."""
    from grader.service import GraderService

    reach = "if __name__ == 'candidate':\n    try:\n        open('/root/.bashrc').read()\n    except OSError:\n" \
            "        pass\n"
    card = dataclasses.replace(load_catalogue()["gelu_fp32"], task_id="expert_reaches_gelu", reference=reach + GELU,
                               expert=reach + GELU)
    cards = tmp_path / "cards.jsonl"
    cards.write_text(json.dumps(dataclasses.asdict(card)) + "\n")
    with GraderService(workers=1, catalogue_extra=[str(cards)], task_workers=True) as svc:
        r = svc.grade_one(GradeRequest(attempt_id="e", task_id="expert_reaches_gelu", source=GELU,
                                       language="pytorch"))
        (conn,) = svc.slots[0]._kept.values()
        assert any("/root/.bashrc" in line for line in conn.audit_lines), conn.audit_lines  # it did reach
    assert r.status is Status.CORRECT and r.sandbox["task_worker"] is True, (r.status, r.reason)
