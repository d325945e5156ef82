"""The sealed grader end to end on CPU: real zygote-forked and fresh worker processes."""
from __future__ import annotations

import os

import pytest

from grader.contract import REWARD_FLOOR, GradeRequest, Reason, Status
from grader.service import GraderService
from tests.grader.sources import HONEST_SOFTMAX

TASK = "softmax_rows_fp32"
HONEST = HONEST_SOFTMAX
TRITON = '''
import torch, triton, triton.language as tl
@triton.jit
def _k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n + cols, e / tl.sum(e, 0), mask=cols < n)
def run(x):
    y = torch.empty_like(x)
    _k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''
CASES = {
    # name: (source, language, expected status, expected reason)
    "honest_torch": (HONEST, "pytorch", Status.CORRECT, Reason.OK),
    "honest_triton": (TRITON, "triton", Status.CORRECT, Reason.OK),
    "syntax": ("def run(x) return x\n", "pytorch", Status.COMPILE_ERROR, Reason.COMPILE),
    "raises": ("def run(x):\n    raise ValueError('nope')\n", "pytorch", Status.RUNTIME_ERROR, Reason.EXCEPTION),
    "abort": ("import os\ndef run(x):\n    os.abort()\n", "pytorch", Status.CRASHED, Reason.CRASH),
    "hang": ("def run(x):\n    while True:\n        pass\n", "pytorch", Status.TIMEOUT, Reason.TIMEOUT),
    "thread_left": ("import threading, time, torch\n" + HONEST.replace("import torch\n", "") +
                    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n",
                    "pytorch", Status.CHEAT_FLAGGED, Reason.THREADS),
    "daemon_left": ("import subprocess\n" + HONEST + "subprocess.Popen(['sleep', '60'], start_new_session=True)\n",
                    "pytorch", Status.CHEAT_FLAGGED, Reason.THREADS),
    "clock_patch": ("import time\n" + HONEST + "time.perf_counter_ns = lambda: 0\n", "pytorch",
                    Status.CHEAT_FLAGGED, Reason.CLOCK_TAMPERED),
    "network": ("import socket\ntry:\n    socket.create_connection(('127.0.0.1', 22), timeout=1)\n"
                "except OSError:\n    pass\n" + HONEST, "pytorch", Status.CHEAT_FLAGGED, Reason.SANDBOX_VIOLATION),
    "read_catalogue": ("import glob\nfor p in glob.glob('/**/grader/catalogue/*.py', recursive=True)[:3]:\n"
                       "    open(p).read()\n" + HONEST, "pytorch", Status.CHEAT_FLAGGED, Reason.SANDBOX_VIOLATION),
    "env_secret": ("import os\nTOKEN = os.environ.get('HF_TOKEN')\n" + HONEST, "pytorch", Status.CHEAT_FLAGGED,
                   Reason.SANDBOX_VIOLATION),
    "write_outside": ("for p in ('/var/tmp/kt_pwned', '/kt_pwned'):\n    try:\n        open(p, 'w').write('x')\n"
                      "    except OSError:\n        pass\n" + HONEST, "pytorch", Status.CHEAT_FLAGGED,
                      Reason.SANDBOX_VIOLATION),
    "fd_exhaustion": ("def run(x):\n    return [open('/dev/null') for _ in range(100000)]\n", "pytorch",
                      Status.RUNTIME_ERROR, Reason.EXCEPTION),
    "ghost_kernel": ("import triton, triton.language as tl\n@triton.jit\ndef _k(x):\n    pass\n" + HONEST,
                     "triton", Status.CHEAT_FLAGGED, Reason.NO_OWN_KERNEL),
}


SHORT_BUDGET_S = {
    # Both grades always last their whole budget, burning a core on the busy loop or the walk all along; the
    # worker is at its call within a second, so 10 s is still ten times what it needs to reach it.
    "hang": 10,
    # The recursive glob never ends (it walks into /proc), so this grade always lasts its whole budget: the
    # sandbox reports the reach at once, but the verdict (cheat_flagged, sandbox_violation, the same reason)
    # is only given when the budget ends. 6 s, 10 s and 30 s of it were measured to say the same as 120 s.
    "read_catalogue": 10,
}


@pytest.fixture(scope="module")
def graded():
    os.environ["HF_TOKEN"] = "hf_secret_that_must_not_leak"
    reqs = [GradeRequest(attempt_id=name, task_id=TASK, source=src, language=lang, seed=3,
                         timeout_s=SHORT_BUDGET_S.get(name, 120)) for name, (src, lang, _, _) in CASES.items()]
    reqs.append(GradeRequest(attempt_id="unknown_task", task_id="no_such_task", source=HONEST, language="pytorch"))
    with GraderService(mode="zygote", workers=2) as svc:
        results = {r.attempt_id: r for r in svc.grade(reqs)}
    return results, None


def test_every_grade_draws_its_own_root_seed(graded):
    """All requests asked for seed 3; no grade used it, and no two grades share one (the call boundary:
    a candidate must not be able to infer its inputs from the request)."""
    results, _ = graded
    seeds = [r.seed for name, r in results.items() if name != "unknown_task"]
    assert 3 not in seeds
    assert len(set(seeds)) == len(seeds)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_outcome(graded, name):
    results, _ = graded
    r = results[name]
    _, _, status, code = CASES[name]
    assert (r.status, r.reason_code) == (status, code), r.reason
    if status is Status.CORRECT:
        assert r.reward > REWARD_FLOOR and r.speedup_geomean and all(s.cand_ms > 0 for s in r.sizes)
        assert any(s.hidden for s in r.sizes) and any(not s.hidden for s in r.sizes)
    else:
        assert r.reward == REWARD_FLOOR


def test_every_request_gets_one_result(graded):
    results, _ = graded
    assert len(results) == len(CASES) + 1
    unknown = results["unknown_task"]
    assert (unknown.status, unknown.reason_code) == (Status.INFRA_ERROR, Reason.UNKNOWN_TASK)  # never graded
    assert "no_such_task" in unknown.reason and "grader tasks" in unknown.reason


def test_sandbox_layers_recorded(graded):
    results, _ = graded
    layers = results["honest_torch"].sandbox
    if os.geteuid() == 0:
        assert layers["mount_ns"] is True and layers["net_ns"] is True
        assert isinstance(layers["uid"], int) and layers["uid"] != 0
        assert any(p.endswith("catalogue") for p in layers["hidden_paths"])
    assert layers["scratch"]
    # The reference's answers came through the arena lent to its worker, not a memfd per answer.
    assert layers["reference_answers"].startswith("arena"), layers["reference_answers"]


def test_hidden_sizes_never_in_the_result(graded):
    from grader.catalogue import load_catalogue
    from grader.taskcard import size_key

    card = load_catalogue()[TASK]
    text = results_text = graded[0]["honest_torch"].to_json()
    for size in card.hidden_sizes["cpu"]:
        assert size_key(size) not in results_text
    assert card.expert.strip()[:40] not in text


@pytest.mark.slow
def test_reference_answers_are_kept_across_attempts_of_a_task_and_still_catch_a_wrong_output():
    """grader.answers end to end: a second attempt of the task is verified on the answers the first one's reference
    computed (none computed again), with seeds of the same pool; a candidate right on its check call and wrong after
    is still caught on the kept answers."""
    wrong_later = HONEST.replace("def run(x):\n", "CALLS = [0]\ndef run(x):\n    CALLS[0] += 1\n").replace(
        "    return e / e.sum(-1, keepdim=True)\n", "    return e / e.sum(-1, keepdim=True) * (1 + (CALLS[0] > 1))\n")
    req = lambda aid, src: GradeRequest(attempt_id=aid, task_id=TASK, source=src, language="pytorch")  # noqa: E731
    with GraderService(mode="zygote", workers=1, answers_for_waiting=False) as svc:  # kept across calls too
        first = svc.grade_one(req("first", HONEST))
        second = svc.grade_one(req("second", HONEST))
        wrong = svc.grade_one(req("wrong_later", wrong_later))
    answers = [[s.loop["answers"] for s in r.sizes] for r in (first, second)]
    assert first.status is second.status is Status.CORRECT, (first.reason, second.reason)
    assert all(a["kept"] == 0 < a["computed"] for a in answers[0]), answers[0]
    assert all(a["computed"] == 0 < a["kept"] for a in answers[1]), answers[1]
    seeds = [{s for a in run for s in a["check_seeds"] + list(a["call_seeds"].values())} for run in answers]
    assert seeds[1] and seeds[1] <= seeds[0]
    assert (wrong.status, wrong.reason_code) == (Status.WRONG_OUTPUT, Reason.TIMED_OUTPUT_MISMATCH), wrong.reason


@pytest.mark.slow
def test_with_answers_for_waiting_an_answer_is_kept_only_while_another_attempt_of_its_task_waits():
    """`GraderService(answers_for_waiting=True)`: an attempt graded with no other of its task waiting copies none of
    the answers its reference computed into the pool; of two graded together, the first keeps its answers (the
    second waits) and the second is verified on them."""
    req = lambda aid: GradeRequest(attempt_id=aid, task_id=TASK, source=HONEST, language="pytorch")  # noqa: E731
    with GraderService(mode="zygote", workers=1) as svc:  # on by default
        alone = svc.grade_one(req("alone"))
        after_alone = svc.answers.stats()
        first, second = sorted(svc.grade([req("first"), req("second")]), key=lambda r: r.attempt_id)
        stats = svc.answers.stats()
    answers = [[s.loop["answers"] for s in r.sizes] for r in (alone, first, second)]
    assert alone.status is first.status is second.status is Status.CORRECT, (alone.reason, first.reason, second.reason)
    computed = sum(a["computed"] for a in answers[0])
    assert computed > 0 and after_alone["answers_held"] == 0 and after_alone["answers_unwanted"] == computed
    assert all(a["kept"] == 0 < a["computed"] for a in answers[1]), answers[1]  # alone's were not kept
    assert all(a["computed"] == 0 < a["kept"] for a in answers[2]), answers[2]
    assert stats["answers_held"] == sum(a["computed"] for a in answers[1]) and stats["answers_unwanted"] == computed


@pytest.mark.slow
def test_fresh_process_mode_grades_the_same():
    with GraderService(mode="fresh", workers=1) as svc:
        r = svc.grade_one(GradeRequest(attempt_id="fresh", task_id=TASK, source=HONEST, language="pytorch"))
    assert r.status is Status.CORRECT, r.reason
    assert r.phase_seconds["startup"] > 0
    if os.geteuid() == 0:  # exec'd, the worker is still forked as the first process of a PID namespace
        assert r.sandbox["pid_ns"] is True and r.sandbox["private_proc"] is True, r.sandbox


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file at the file system root needs root")
def test_no_directory_outside_the_system_is_readable_even_through_libc(tmp_path):
    """A copy of the catalogue anywhere on the host (another checkout, a data disk) stays out of reach,
    also for reads through libc that no audit hook sees; the interpreter itself stays usable."""
    import shutil
    import uuid

    root = f"/kt-probe-{uuid.uuid4().hex[:8]}"
    try:
        os.makedirs(root)
    except OSError as e:
        pytest.skip(f"cannot plant a directory at the file system root here: {e}")
    try:
        with open(f"{root}/secret.txt", "w") as f:
            f.write("expert source")
        # ctypes by a computed name: the static refusal of the word (grader 0.9.0) would end the probe first
        probe = ("import os\n_ff = __import__('ct' + 'ypes')\n_libc = _ff.CDLL(None, use_errno=True)\n"
                 f"FD = _libc.open(b'{root}/secret.txt', os.O_RDONLY)\n"
                 "def run(x):\n    if FD >= 0:\n        raise RuntimeError('read the planted secret')\n"
                 + HONEST.split("def run(x):\n", 1)[1])
        with GraderService(mode="zygote", workers=1) as svc:
            r = svc.grade_one(GradeRequest(attempt_id="probe", task_id=TASK, source=probe, language="pytorch"))
        assert r.status is Status.CORRECT, r.reason
        assert root in r.sandbox["hidden_paths"]
    finally:
        shutil.rmtree(root)


@pytest.mark.slow
def test_expert_twin_is_kept_per_task_under_its_own_uid_and_replaced_when_it_dies():
    """The expert is timed in a twin worker: kept for the next attempt of the same task, never under
    the candidate's uid (a candidate must not signal or trace it), and a dead twin is started anew
    rather than failing the next grade."""
    import signal

    with GraderService(workers=1) as svc:
        slot = svc.slots[0]

        def grade(name):
            r = svc.grade_one(GradeRequest(attempt_id=name, task_id=TASK, source=HONEST, language="pytorch"))
            assert r.status is Status.CORRECT, r.reason
            # the twin: a task worker (`task_workers`, on by default), which runs under the expert's uid
            (twin,) = [conn for name, conn in slot._kept.items() if name.startswith(("expert:", "task:"))]
            return twin.pid

        first = grade("a")
        assert grade("b") == first
        if os.geteuid() == 0:
            assert slot.expert_uid is not None and slot.expert_uid != slot.uid
            assert os.stat(f"/proc/{first}").st_uid == slot.expert_uid
        os.kill(first, signal.SIGKILL)
        assert grade("c") != first
