"""The client's retry loop (`grade_with_retries`): one outcome per request, repeats of an attempt included.

The service here is a script of results, because what is tested is the loop's bookkeeping alone; the real service
goes through the same loop in `tests/grader/test_acceptance_summary.py` (a repeat in one round on the CPU)."""
import pytest

from grader.contract import REWARD_FLOOR, GradeRequest, GradeResult, Reason, Status
from pipelines.grading.client import GradingIncomplete, grade_with_retries


def _request(aid: str, seed: int) -> GradeRequest:
    return GradeRequest(attempt_id=aid, task_id="softmax_rows_fp32", source="", language="triton",
                        entry_point="run", seed=seed)


def _result(aid: str, status: Status, total_s: float = 1.0) -> GradeResult:
    reason = Reason.INFRA if status is Status.INFRA_ERROR else Reason.OK
    return GradeResult(attempt_id=aid, task_id="softmax_rows_fp32", task_revision="r", grader_version="v",
                       status=status, reason_code=reason, reason="scripted", reward=REWARD_FLOOR, seed=0,
                       profile="auto", device="cpu", fingerprint_id="f", phase_seconds={"total": total_s})


def _scripted(*tries: list[tuple[str, Status]]):
    """A service that answers its n-th batch with the n-th list of (attempt, status), and records the batches."""
    batches = []

    def grade(batch):
        batches.append(sorted((r.attempt_id, r.seed) for r in batch))
        return [_result(aid, st, 2.0) for aid, st in tries[len(batches) - 1]]
    return grade, batches


def test_every_repeat_of_an_attempt_in_one_batch_gets_its_own_outcome_and_its_own_retry():
    """The acceptance grades each cheat three times in one round (seeds 1017, 2017, 3017). Keyed by attempt alone,
    the loop sent only the last of them and yielded one outcome (H100 runs 106-112: every cheat graded once). Each
    request is owed an outcome; an infra_error answers one repeat, which alone is sent again."""
    reqs = [_request("cheat", s) for s in (1017, 2017, 3017)] + [_request("honest", 1017)]
    grade, batches = _scripted(
        [("cheat", Status.CHEAT_FLAGGED), ("cheat", Status.INFRA_ERROR), ("honest", Status.WRONG_OUTPUT),
         ("cheat", Status.CHEAT_FLAGGED)],
        [("cheat", Status.CHEAT_FLAGGED)])
    outcomes = list(grade_with_retries(1, grade, reqs))
    assert batches[0] == [("cheat", 1017), ("cheat", 2017), ("cheat", 3017), ("honest", 1017)]
    assert batches[1] == [("cheat", 2017)]
    assert sorted((o.result.attempt_id, o.result.status.value, o.tries, o.retry_s) for o in outcomes) == [
        ("cheat", "cheat_flagged", 1, 0.0), ("cheat", "cheat_flagged", 1, 0.0), ("cheat", "cheat_flagged", 2, 2.0),
        ("honest", "wrong_output", 1, 0.0)]


def test_more_results_for_an_attempt_than_its_requests_is_refused_and_a_lost_repeat_named():
    grade, _ = _scripted([("a", Status.WRONG_OUTPUT), ("a", Status.WRONG_OUTPUT)])
    with pytest.raises(GradingIncomplete, match="unknown or already answered attempt 'a'"):
        list(grade_with_retries(0, grade, [_request("a", 1)]))
    grade, _ = _scripted([("a", Status.WRONG_OUTPUT)], [])
    with pytest.raises(GradingIncomplete, match=r"no grade after 2 tries for: \['a'\]"):
        list(grade_with_retries(1, grade, [_request("a", 1), _request("a", 2)]))
