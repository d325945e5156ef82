"""An attempt loaded ahead of its grade (`GraderService(load_ahead=True)`, off: slower on H100 run 92).

While a slot grades one attempt, its next one's worker is started (the slot's spare, under its second candidate
uid), lent its output arena, given the attempt's code to load, and then the head of its grade is made
(`session.grade_head`): the grade's root seed and secret generator, its first size planned, trimmed and observed, and
its first check call, which compiles. At 6 slots on an H100 (runs 89 and 90) a grade spent 0.33 s taking its worker,
0.23 s loading and 1.38 s in its first call, of 8.7 s of the slot's time; here they run beside the slot's previous
grade.

What it changes, and what it does not:
- The first check call made ahead is the grade's own: its seed from the grade's plan, under the grade's observation,
  its reply checked as any call's (`_cand_reply`), its output kept in the worker and verified by the grade against
  the reference, its record judged with the size's. Nothing else of the candidate's runs ahead. (A first version
  made an extra, unchecked call ahead instead: attempts that raised, answered zeros or ran a forbidden op on their
  first call only graded correct.)
- What that check raised, or what ended the preparation (a worker that failed to start, a crash, a hang), is raised
  in the grade at the step where its own would have met it (`Prepared.taken`, `arena`, `loaded`, `Head.size`,
  `Head.reply`).
- The time it spent is spent of the attempt's budget (`Prepared.spent_s`); its wait for the slot is not.
- A preparation that found what ends its grade kills its worker and its uid's processes at once (`Slot.stop`): a
  floored attempt's forks do not run on beside the slot's grade until its own begins.
- Two candidates' workers are alive in the slot at once, each under its own uid with its own output arena
  (`Slot.lend_output_arena`, one per uid with `load_ahead`); the next spare starts only once the earlier attempt is
  finished (`Slot.spawn_ahead`, `Slot.resume_spares`), since that attempt's end sweeps its uid.
- The import and the first call run in no window of the device lock, as they always have (the first call compiles
  for seconds of CPU): beside their own slot's previous grade instead of beside another slot's. A task whose inputs
  its reference makes has no head made ahead: that worker is the slot's, busy with the grade beside.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from grader.contract import GradeRequest
from grader.launcher import Slot, WorkerConn


@dataclass
class Prepared:
    """One attempt's preparation ahead of its grade, run on a thread of its own (`prepare`)."""

    req: GradeRequest
    conn: WorkerConn | None = None
    layers: dict = field(default_factory=dict)
    """The sandbox record it adds to the grade's (`worker`, `ahead_s`)."""
    arena_state: str = ""
    offer: list = field(default_factory=list)
    load_reply: dict | None = None
    built: bytes = b""
    head: object = None
    """The head of its grade (`session.grade_head`), made once it loaded: its first size and first check call."""
    stage: str = "start"
    """Where it is, or where it ended: start, arena, load, head, done."""
    error: BaseException | None = None
    spent_s: float = 0.0
    thread: threading.Thread | None = None

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def _raise_at(self, stage: str) -> None:
        if self.error is not None and self.stage == stage:
            raise self.error

    def taken(self, slot: Slot, memory_limit_mb: int | None) -> WorkerConn:
        """The worker, now the slot's (the next spare starts); what ended its start is raised. A worker that died
        ahead is the grade's all the same: its load's error (raised by `loaded`) and its end (`Slot.finish`) say how,
        as they would have in the grade."""
        self._raise_at("start")
        slot.settle(self.conn)
        slot.resume_spares(self.conn, memory_limit_mb)
        return self.conn

    def arena(self) -> str:
        self._raise_at("arena")
        return self.arena_state

    def loaded(self) -> tuple[list, dict, bytes]:
        """The load's offer, reply (checked ahead) and built payload; what ended it is raised, and so is what ended
        the head where it kept nothing (`session.grade_head` keeps all it meets: none expected)."""
        self._raise_at("load")
        self._raise_at("head")
        return self.offer, self.load_reply, self.built


def prepare(req: GradeRequest, task, slot: Slot, busy: WorkerConn, effort, answers=None, device_name: str = "",
            ext_cache=None, build_env=None, watch=None, roles=dict) -> Prepared:
    """Start preparing `req` on a thread while `busy` (the slot's attempt now graded) runs. An attempt that needs no
    worker (it floors before one starts: `session.precheck`) prepares nothing, and its grade floors it as ever."""
    from grader import session

    if not (slot.spares and slot.load_ahead):
        raise RuntimeError("loading ahead needs `load_ahead` and the slot's second candidate uid (spares, as root)")
    prepared = Prepared(req)

    def run() -> None:
        t0 = time.monotonic()
        deadline = t0 + req.timeout_s
        cuda = slot.device.startswith("cuda")
        profile = req.profile if req.profile != "auto" else ("gpu" if cuda else "cpu")
        try:
            session.precheck(req, task.card, cuda, profile)
        except session.Floor:  # its grade floors it, with no worker
            prepared.stage = "done"
            return

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise session.Floor(session.Status.TIMEOUT, session.Reason.TIMEOUT,
                                    f"attempt exceeded its {req.timeout_s:.0f} s budget")
            return left

        parts = {}
        try:
            t = time.monotonic()
            prepared.conn = conn = slot.spawn_ahead(busy, min(remaining(), 300.0), req.memory_limit_mb)
            prepared.layers = {"worker": "loaded ahead"}
            prepared.stage = "arena"
            prepared.arena_state = slot.lend_output_arena(conn, task.fetch_bytes, min(remaining(), 60.0))
            parts["startup"] = time.monotonic() - t
            prepared.stage = "load"
            t = time.monotonic()
            source, entry = session.loaded_source(req, task.card)
            layers = dict(conn.hello.get("sandbox", {}))
            use = (ext_cache is not None and build_env is not None
                   and session.compile_cache.sealed_from(layers, ext_cache.root))
            prepared.offer, blob = session._offer(ext_cache, source, build_env) if use else ([], b"")
            reply, prepared.built, _ = session._request(
                conn, {"op": "load", "source": source, "entry_point": entry, "ext_offer": prepared.offer},
                remaining, blob)
            prepared.load_reply = reply
            session._check_guards(conn, reply, slot)
            parts["load"] = time.monotonic() - t
            if reply.get("ok"):  # what ends the head is kept in it, raised where the grade's own step would meet it
                prepared.stage = "head"
                prepared.head = session.grade_head(req, task, slot, conn, effort, answers, remaining, device_name,
                                                   watch, roles)
                parts.update(prepared.head.parts if prepared.head is not None else {})
            prepared.stage = "done"
        except Exception as e:  # noqa: BLE001 - raised again in the grade, at its stage, as its own would be
            prepared.error = e
        finally:
            prepared.spent_s = time.monotonic() - t0
            prepared.layers["ahead_s"] = {k: round(v, 4) for k, v in parts.items()}
            head = prepared.head
            if prepared.conn is not None and (prepared.error is not None or (
                    head is not None and (head.before is not None or head.at_call is not None))):
                slot.stop(prepared.conn)  # its grade ends where this did: nothing of it runs on beside the slot's

    prepared.thread = threading.Thread(target=run, name=f"slot{slot.index}-ahead-{req.attempt_id}"[:60], daemon=True)
    slot.preparing(prepared.thread)
    return prepared
