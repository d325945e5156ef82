"""Kept tasks (`GraderService(keep_tasks=...)`): a slot keeps the expert and reference workers of more tasks than
its last two, takes a task it keeps before the queue's first, and sets the others aside as it begins a task
(`Slot.set_aside_all_but`: their workers give their cached device memory back). Real zygotes and workers on the
CPU."""
from __future__ import annotations

import pytest

from grader.contract import GradeRequest, Status
from grader.service import GraderService, _Queue, kept_tasks_for

HONEST = {  # three tasks' honest attempts: each grade starts its task's expert and reference workers
    "softmax_rows_fp32": "import torch\ndef run(x):\n    e = (x - x.max(-1, keepdim=True).values).exp()\n"
                         "    return e / e.sum(-1, keepdim=True)\n",
    "gelu_fp32": "import torch\ndef run(x):\n    return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))\n",
    "bias_leaky_relu_fp32": "import torch\ndef run(x, b):\n    y = x + b\n    return torch.where(y > 0, y, 0.1 * y)\n",
}


def _req(name: str, task: str) -> GradeRequest:
    return GradeRequest(attempt_id=name, task_id=task, source=HONEST[task], language="pytorch")


def test_a_slot_needing_a_new_task_takes_one_whose_workers_it_keeps_first():
    reqs = [_req(f"{t}{i}", t) for i, t in enumerate(["gelu_fp32", "softmax_rows_fp32", "bias_leaky_relu_fp32",
                                                      "gelu_fp32", "bias_leaky_relu_fp32"])]
    q = _Queue(reqs)
    assert q.take(None, kept={"bias_leaky_relu_fp32"}).attempt_id == "bias_leaky_relu_fp322"
    # a kept task another slot grades is not taken (bias has a request left): the first free one is
    assert q.take(None, kept={"bias_leaky_relu_fp32"}).attempt_id == "gelu_fp320"
    # affinity first: a slot with its last task's requests waiting keeps to it, whatever else it keeps
    assert q.take("gelu_fp32", kept={"softmax_rows_fp32"}).attempt_id == "gelu_fp323"
    assert q.take("gelu_fp32", kept={"softmax_rows_fp32"}).attempt_id == "softmax_rows_fp321"
    assert q.take("bias_leaky_relu_fp32").attempt_id == "bias_leaky_relu_fp324"
    assert q.take("softmax_rows_fp32") is None and len(q) == 0


def test_a_task_that_goes_first_still_does_whatever_a_slot_keeps():
    """A CUDA request's build is long, and a request released from its build ahead has waited for it: either goes
    before a task the slot keeps."""
    cuda = GradeRequest(attempt_id="c0", task_id="softmax_rows_fp32", source=HONEST["softmax_rows_fp32"],
                        language="cuda")
    q = _Queue([_req("g0", "gelu_fp32"), cuda])
    assert q.take(None, kept={"gelu_fp32"}).attempt_id == "c0"
    built = _req("b0", "bias_leaky_relu_fp32")
    q = _Queue([_req("g0", "gelu_fp32"), _req("s0", "softmax_rows_fp32"), built], held={id(built)})
    q.release(built)
    assert q.take(None, kept={"gelu_fp32"}).attempt_id == "b0"
    assert q.take(None, kept={"softmax_rows_fp32"}).attempt_id == "s0"


def test_the_tasks_kept_follow_the_devices_memory():
    assert kept_tasks_for(140.4, 8) == 4  # an H200 with 8 slots
    assert kept_tasks_for(79.6, 6) == 2  # an H100: no more than the default
    assert kept_tasks_for(0.0, 1) == 2 and kept_tasks_for(1000.0, 1) == 6


@pytest.mark.slow
@pytest.mark.parametrize("keep", [False, 3])
def test_a_task_graded_again_finds_its_workers_kept_when_the_slot_keeps_enough_tasks(keep):
    """One slot grades three tasks, one round each, then the first again. By default it keeps the workers of its last
    two tasks: the first task's are started anew. Keeping three, they are the same processes, set aside (no size's
    memory ready in them) while the others were graded."""
    with GraderService(workers=1, keep_tasks=keep) as svc:
        slot = svc.slots[0]

        def workers(task: str) -> dict[str, int]:
            key = svc.task(task).expert_key
            return {name.split(":")[0]: conn.pid for name, conn in slot._kept.items() if name.endswith(":" + key)}

        tasks = list(HONEST)
        for i, task in enumerate(tasks + tasks[:1]):
            (r,) = svc.grade([_req(f"a{i}", task)])
            assert r.status is Status.CORRECT, (task, r.reason)
            if i == 0:
                first = workers(task)
                assert set(first) == {"task"}  # one worker a task (`task_workers`, on by default)
            if i == 1 and keep:
                conns = [c for n, c in slot._kept.items() if n.endswith(":" + svc.task(tasks[0]).expert_key)]
                assert conns and all(c.trimmed is None and c.answered is None for c in conns)
        again = workers(tasks[0])
        assert len(slot._kept) == min(3, svc.kept_tasks)  # a task worker counts for two (`launcher.KEPT_WEIGHT`)
        if keep:
            assert again == first
        else:
            assert set(again) == {"task"} and not set(again.values()) & set(first.values())


@pytest.mark.slow
@pytest.mark.parametrize("keep", [False, 3])
def test_a_round_starts_with_a_task_whose_workers_the_slot_kept_from_the_last(keep):
    """Rounds are grades of their own: a slot begins one with no last task. Keeping tasks, it takes first the one it
    kept from the round before; by default, the queue's first."""
    with GraderService(workers=1, keep_tasks=keep) as svc:
        (r,) = svc.grade([_req("a0", "gelu_fp32")])
        assert r.status is Status.CORRECT, r.reason
        order = [r.task_id for r in svc.grade([_req("b0", "softmax_rows_fp32"), _req("b1", "gelu_fp32")])]
        assert order == (["gelu_fp32", "softmax_rows_fp32"] if keep else ["softmax_rows_fp32", "gelu_fp32"])
