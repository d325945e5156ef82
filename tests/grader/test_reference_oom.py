"""A task's reference that runs out of device memory is asked again a little later (`session._answered_with_room`):
on a full device the memory it lacked is most often other slots' (H100 run 96). One that runs out every time still
fails the grade as the grader's, saying why. On the CPU, with real workers: the reference raises torch's
out-of-memory error itself, for its first calls or for all of them."""
from __future__ import annotations

import pytest

from grader.contract import GradeRequest, Reason, Status
from grader.session import REFERENCE_OOM_TRIES, REFERENCE_OOM_WAIT_S

_DOUBLE = "import torch\ndef run(x):\n    return x * 2\n"


def _reference(fails: int, error: str = "torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 4.00 GiB')"
               ) -> str:
    """A reference that raises `error` on its first `fails` calls (a count its module keeps)."""
    return ("import torch\ncalls = []\ndef run(x):\n    calls.append(1)\n"
            f"    if len(calls) <= {fails}:\n"
            f"        raise {error}\n"
            "    return x * 2\n")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from grader.service import GraderService
    from grader.taskcard import InputSpec, TaskCard
    from pipelines.importers import write_cards

    cards = [TaskCard(task_id=f"oom_{name}", family="elementwise", lineage="tests/oom", description="x * 2, fp32",
                      inputs=(InputSpec("x", ("M", "N")),), output_shape=("M", "N"), output_dtype="float32",
                      reference=_reference(fails, *error), expert=_DOUBLE, expert_kind="library",
                      public_sizes={"cpu": ({"M": 16, "N": 32},)}, hidden_sizes={"cpu": ({"M": 8, "N": 24},)},
                      bytes_moved="2 * M * N * E")
             for name, fails, *error in (("once", 1), ("always", 10**6), ("raises", 1, "ValueError('a bug')"))]
    catalogue = tmp_path_factory.mktemp("oom_cards") / "cards.jsonl"
    write_cards(cards, catalogue)
    reqs = [GradeRequest(attempt_id=c.task_id, task_id=c.task_id, source=_DOUBLE, language="pytorch", profile="cpu",
                         timeout_s=120) for c in cards]
    with GraderService(mode="zygote", workers=1, device="cpu", catalogue_extra=[str(catalogue)]) as svc:
        results = {r.attempt_id: r for r in svc.grade(reqs)}
        return results, svc.gpu_lock.stats()


@pytest.mark.slow
def test_a_reference_out_of_memory_once_is_asked_again_and_the_attempt_graded(graded):
    results, stats = graded
    r = results["oom_once"]
    assert r.status is Status.CORRECT, f"{r.reason_code.value}: {r.reason}"
    # asked again once for this task, every time it may for `oom_always` (its grade's first answer fails), and never
    # for `oom_raises` (its first answer raised something else: asked again, it would have answered)
    asked_again, _ = stats["purposes"]["reference worker: out of memory, asked again"]
    assert asked_again == 1 + (REFERENCE_OOM_TRIES - 1)
    # each wait gave the device's window back: the call asked again took a window of its own, and the references'
    # windows together held the device for less than the waits did (held through them, they would hold it longer;
    # less than one wait failed once on a loaded 2-core host, 0.667 s)
    assert stats["draws_by"]["check window: reference, asked again"][0] == asked_again
    held_s = sum(s for label, (_, s) in stats["draws_by"].items() if label.startswith("check window: reference"))
    assert held_s < asked_again * REFERENCE_OOM_WAIT_S, stats["draws_by"]


@pytest.mark.slow
def test_a_reference_out_of_memory_every_time_fails_the_grade_as_the_graders(graded):
    results, _ = graded
    r = results["oom_always"]
    assert (r.status, r.reason_code) == (Status.INFRA_ERROR, Reason.INFRA), r.reason
    assert "out of memory" in r.reason.lower()


@pytest.mark.slow
def test_a_reference_that_raises_anything_else_is_not_asked_again(graded):
    results, _ = graded
    r = results["oom_raises"]
    assert (r.status, r.reason_code) == (Status.INFRA_ERROR, Reason.INFRA), r.reason
    assert "a bug" in r.reason
