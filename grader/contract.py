"""The grade request/result contract: the one place where a grade's shape is defined.

Requests and results travel as JSON lines between the grading resource and `python -m grader`.
Only the standard library is used here so a bare GPU worker can load it.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

GRADER_VERSION = "0.24.0"
"""Bumped whenever anything that can move a reward changes (protocol, tolerances, timing); its last part for a change
of labels alone (0.19.1: a cuda candidate's wrong output after its own build failed is that build failure) or of when
the grader fails (0.19.2: a reference out of device memory is asked again before its grade ends infra_error; 0.19.3:
with `memory_watch`, a candidate out of memory is judged on the device's full readings of the 2 s before too).
0.20.0: the timing's windows change, `gated_check_calls` and `settled_pairs` on by default, and `memory_watch` too.
0.20.1: the opt-in `load_ahead` removed (slower on H100 run 92; off, so no default grade changes).
0.20.2: the opt-in `role_spares` removed (slower on H100 run 88; off, so no default grade changes).
0.20.3: the opt-in `end_behind` removed (no gain on H200 run 95; off, so no default grade changes).
0.20.4: the opt-in `failed_build_floor` removed (no gain on H100 run 111; off, so no default grade changes).
0.20.5: the views of real tensors missing from the structural ops (`aten::numpy_T`, `mT`, `movedim`, `ravel`,
`broadcast_to`, `unfold`, the splits...) are in them: `x.T` no longer floors an honest candidate as a library op.
0.21.0: `task_workers` on by default: a task whose expert and reference come from one author has one kept worker for
both (`Slot.task`), so its expert is timed in a worker that also answers for the reference (H100 runs 118 and 119).
0.21.1: `fail_fast_builds` on by default: a build ahead ends at its first failed command (`grader.ninjastop`), so a
failed build's message holds that command's verdicts only, not those of the commands it stopped (H100 runs 120, 121).
0.21.2: `seed_triton` on by default: every worker's Triton cache starts with Triton's host module as the service built
it (`grader.tritonseed`), so no worker builds it with the C compiler (H200 runs 123 and 124).
0.21.3: an extension's build is filed under the material its call was made with, not under the flags torch's loader
appended to the caller's `extra_ldflags` in place, so a later call of the same build finds it (H100 run 125: a
CUDA-L1 attempt's failure built ahead was compiled again in its slot); the same labels, sooner.
0.22.0: `slow_checks_warm` and `start_ahead` on by default: a size whose two check calls each ran 20 ms or more of
their own device work gets no warm-up pair, and a task's kept worker starts as its grade begins (H100 runs 126 and
127, H200 run 128).
0.23.0: `gated_reference`, `warmup_release` and `keep_size_memory` on by default: a built-in reference's later answers
at a size queue behind its worker's launch gate, a warm-up call holds its draw window only up to "released", and a
kept worker keeps its cached memory across sizes while the device has room. On one H100 (H100 run 132, an ABAB of
round 1 cut off at 34-40 attempts) round 1 graded 2,290 and 2,410 per GPU-hour with the three against 2,097 and 2,305
without; the acceptance with them (H100 run 133) held every figure (12/12 cheats in 3 of 3 grades, 87/87 escapes,
0/48 honest floored, self-reward -0.0028 / 0.0109, repeats 0.0057 / 0.0228), and so did the acceptance of the defaults
(H100 run 134), grading every round at 4,149 per GPU-hour against run 130's 3,585 and round 1 at 2,590 against 2,568.
0.24.0: `hang_watch` on by default: an attempt whose load or first call moves none of the kernel's counts of work for
10 s (a spin, or a wait nothing ends) is a timeout then, not at its 60 s budget (`grader.hangwatch`). The same label,
sooner, with another reason; the acceptance with it (H100 run 138) ended the demo's hang in 13.1 s against 60.2 and
held every figure (12/12 cheats in 3 of 3 grades, 87/87 escapes, 0/48 honest floored, self-reward +0.0001 / 0.0079,
repeats 0.0057 / 0.0303, 0/68 label flips)."""

REWARD_FLOOR = -24.0
"""Reward of every attempt that is not a correct, unflagged kernel."""

SPEEDUP_CLIP = (1.0 / 64.0, 8.0)
"""Per-size speedups are clipped into this range before aggregation (GRADER.md 6, threat 15)."""

MAX_SOURCE_BYTES = 256 * 1024
"""Largest candidate source accepted; larger ones are quarantined at ingest."""


class Status(str, enum.Enum):
    """Closed set of terminal grade states; every result carries one plus a reason."""

    CORRECT = "correct"
    WRONG_OUTPUT = "wrong_output"
    CHEAT_FLAGGED = "cheat_flagged"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    UNSUPPORTED_ON_BACKEND = "unsupported_on_backend"
    INFRA_ERROR = "infra_error"

    @property
    def is_candidate_fault(self) -> bool:
        """True when the attempt itself is to blame (floored), false for infra problems."""
        return self not in (Status.INFRA_ERROR, Status.UNSUPPORTED_ON_BACKEND)


class Reason(str, enum.Enum):
    """Machine-readable cause behind a status; the free-text `reason` explains the instance."""

    OK = "ok"
    MISMATCH = "mismatch"                      # some element outside tolerance (wrong_output)
    NONFINITE = "nonfinite"                    # NaN/Inf where the reference has none (wrong_output)
    UNWRITTEN = "unwritten_output"             # poisoned elements survived the call (wrong_output)
    CONSTANT_OUTPUT = "constant_output"        # trivial output where the reference varies (wrong_output)
    BAD_OUTPUT = "bad_output"                  # not a plain tensor of the declared shape/dtype/device
    TIMED_OUTPUT_MISMATCH = "timed_output_mismatch"  # an output verified after timing was wrong
    INPUT_MUTATED = "input_mutated"            # inputs changed by the call
    THREADS = "background_threads"             # threads or processes left running after the call
    CLOCK_TAMPERED = "clock_tampered"          # timers or grader hooks replaced, or child clock disagrees
    TIMING_ESCAPED = "timing_escaped"          # work outside the timed stream (side streams, deferred)
    L2_PERSISTING = "persisting_l2"           # reserved persisting L2 that survives the flush between calls
    BELOW_FLOOR = "below_physical_floor"       # faster than the bytes the call must move allow
    FORBIDDEN_OP = "forbidden_op"              # called the library op that does the whole job
    NO_OWN_KERNEL = "no_own_kernel"            # a triton or cuda candidate whose own kernel never ran
    INHERITANCE_BYPASS = "inheritance_bypass"  # static: subclasses or calls the reference model
    SANDBOX_VIOLATION = "sandbox_violation"    # tried to reach files, network or secrets it may not
    INTERPRETER = "interpreter_state"          # changed the worker's interpreter: hooks, modes, signals, builtins
    AUDIT_CHANNEL = "audit_channel"            # replaced or closed the channel that reports its reaches
    DISPATCHER_ESCAPE = "dispatcher_escape"    # static: reaches past the dispatcher (torch.library, redispatch, modes)
    LIBRARY_COMPUTE = "library_compute"        # an own-kernel candidate computed with library ops
    PROTOCOL = "protocol_forged"               # wrote a frame of its own onto the grader's protocol channel
    OUTPUT_FLOOD = "output_flood"              # printed more than the worker's log may hold
    COMPILE = "compile"                        # import/JIT compilation failed
    EXCEPTION = "exception"                    # raised during a call
    OOM = "out_of_memory"
    TIMEOUT = "timeout"
    CRASH = "crash"                            # worker died (signal, abort, segfault)
    UNSUPPORTED = "unsupported"                # language/backend combination not available here
    INFRA = "infra"                            # grader-side failure, not the candidate's fault
    UNKNOWN_TASK = "unknown_task"              # the request names no task of this grader's catalogue


@dataclass(frozen=True)
class GradeRequest:
    """One attempt to grade: the candidate's code and the task it claims to solve."""

    attempt_id: str
    """Stable id of the raw attempt; lineage key from a published row back to the input."""
    task_id: str
    """Id of the task card in the catalogue."""
    source: str
    """Candidate source: a Python module defining the entry point."""
    language: str = "triton"
    """`triton`, `pytorch` or `cuda` (CUDA through torch's extension loader)."""
    entry_point: str = "run"
    """Name of the callable in the candidate module: `run(*inputs) -> Tensor`."""
    seed: int = 0
    """The requester's seed, kept with the request (a pass number, a replay label). It never decides an
    input: every grade draws its own root seed from the OS and records it in `GradeResult.seed`, so no
    candidate can infer its inputs from the request (GRADER.md, the call boundary)."""
    profile: str = "auto"
    """Size profile: `cpu`, `gpu` or `auto` (gpu when CUDA is present)."""
    timeout_s: float = 60.0
    """Wall-clock budget for the whole attempt in the worker."""
    memory_limit_mb: int = 8192
    """Address-space limit of the candidate's worker on CPU (host memory); it can only tighten the
    service's own limit. On a GPU the CUDA context needs a vast address space, so it is not applied."""
    sharing: str = "isolated"
    """Declared sharing setting of the GPU while grading (recorded, checked against NVML)."""


@dataclass(frozen=True)
class SizeResult:
    """Timing and correctness for one size of one attempt."""

    size_key: str
    """Canonical text of the size (`M=128,N=256`); hidden sizes stay in sealed storage only."""
    hidden: bool
    """True when this size was never shown to the agent."""
    cand_ms: float | None
    """Median candidate time per call, milliseconds (None when not timed)."""
    expert_ms: float | None
    """Median expert time per call in the same run, milliseconds."""
    cand_ms_ci: tuple[float, float] | None = None
    """Confidence interval of the candidate median (lower, upper), milliseconds."""
    expert_ms_ci: tuple[float, float] | None = None
    """Confidence interval of the expert median, milliseconds."""
    reps: int = 0
    """Timed repetitions per side."""
    log2_speedup_ci: tuple[float, float] | None = None
    """~95% interval of log2(speedup) from the paired (expert, candidate) calls, before clipping."""
    late_ms: float = 0.0
    """Charged to each candidate call: how far its median gap from the end event to the device-wide
    done event exceeded its expert twin's (work left running after the call returned)."""
    speedup: float | None = None
    """expert_ms / cand_ms after clipping."""
    max_rel_err: float | None = None
    """Largest |out-ref| / (atol + rtol*|ref|) seen over all verified calls (<= 1 passes)."""
    device_watch: dict | None = None
    """What NVML saw during the timing loop (grader.devicewatch): SM clock at start and end, clock-event
    reasons, and every other process that used the device meanwhile, by role. None without NVML."""
    loop: dict | None = None
    """Where the timing loop spent its time (`session._loop_record`): seconds held, pairs, per-call medians (ms)
    of the parent's round trip, the worker's span (and its parts) and the device interval, for the candidate
    and its twin, and how many calls the parent had to let through the launch gate (`stalled`); how the loop
    held the device (`held`: `loop` or `exclusive`, grader/devicelock.py), whether its calls interleaved with
    other slots' loops window by window (`interleaved`), the seconds it waited for their windows
    (`window_wait_s`) and held its own (`window_held_s`). None when not timed."""


@dataclass
class GradeResult:
    """The verdict for one attempt, with everything needed to reproduce it."""

    attempt_id: str
    task_id: str
    task_revision: str
    """Content hash of the task card that was used."""
    grader_version: str
    status: Status
    reason_code: Reason
    """Machine-readable cause (closed enum)."""
    reason: str
    """Human-readable why, always set (also for `correct`)."""
    reward: float
    seed: int
    profile: str
    device: str
    """`cpu` or the CUDA device name."""
    fingerprint_id: str
    """Hash of the hardware fingerprint (see grader.fingerprint)."""
    fingerprint: dict[str, Any] = field(default_factory=dict)
    sizes: list[SizeResult] = field(default_factory=list)
    speedup_geomean: float | None = None
    """Geometric mean of the clipped per-size speedups (correct grades only)."""
    measured_speedup_geomean: float | None = None
    """Geomean speedup the timer measured before any verdict (also for floored attempts)."""
    tolerances: dict[str, Any] = field(default_factory=dict)
    """The atol/rtol actually applied, stored with every grade."""
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Wall seconds by phase: startup, compile, correctness, timing, expert, total."""
    sandbox: dict[str, Any] = field(default_factory=dict)
    """Which isolation layers were active for the worker (namespaces, uid, rlimits)."""
    sharing: str = "isolated"
    kernels_launched: list[str] = field(default_factory=list)
    """Kernel or op names observed in the profiled call (evidence for threats 17/18)."""

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.reason_code = Reason(self.reason_code)
        check_consistent(self)

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["status"] = self.status.value
        d["reason_code"] = self.reason_code.value
        return json.dumps(d, sort_keys=True, allow_nan=False, default=_jsonable)

    @staticmethod
    def from_json(text: str) -> "GradeResult":
        d = json.loads(text)
        d["sizes"] = [SizeResult(**{**s, "cand_ms_ci": _tup(s.get("cand_ms_ci")),
                                    "expert_ms_ci": _tup(s.get("expert_ms_ci")),
                                    "log2_speedup_ci": _tup(s.get("log2_speedup_ci"))}) for s in d.get("sizes", [])]
        return GradeResult(**d)


def _tup(v):
    return tuple(v) if v is not None else None


def _jsonable(o):
    if isinstance(o, enum.Enum):
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def request_to_json(req: GradeRequest) -> str:
    return json.dumps(dataclasses.asdict(req), sort_keys=True)


def request_from_json(text: str) -> GradeRequest:
    d = json.loads(text)
    known = {f.name for f in dataclasses.fields(GradeRequest)}
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"grade request has unknown fields: {sorted(unknown)}")
    return GradeRequest(**d)


def reward(status: Status, speedups: list[float]) -> float:
    """The one reward function: log2 of the geometric-mean clipped speedup when correct, else the floor."""
    if Status(status) is not Status.CORRECT:
        return REWARD_FLOOR
    if not speedups:
        raise ValueError("a correct grade needs at least one timed size")
    return sum(math.log2(clip_speedup(s)) for s in speedups) / len(speedups)


def clip_speedup(s: float) -> float:
    lo, hi = SPEEDUP_CLIP
    return min(max(s, lo), hi)


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return 2.0 ** (sum(math.log2(v) for v in vals) / len(vals))


def check_consistent(r: GradeResult) -> None:
    """Cross-field rules: a correct grade has timings and its reward; anything else sits at the floor."""
    if not r.reason:
        raise ValueError(f"{r.attempt_id}: every grade needs a reason")
    if r.status is Status.CORRECT:
        timed = [s for s in r.sizes if s.speedup is not None]
        if not timed:
            raise ValueError(f"{r.attempt_id}: a correct grade must carry per-size timings")
        expected = reward(r.status, [s.speedup for s in timed])
        if not math.isclose(r.reward, expected, abs_tol=1e-9):
            raise ValueError(f"{r.attempt_id}: reward {r.reward} != {expected} from its timings")
    elif r.reward != REWARD_FLOOR:
        raise ValueError(f"{r.attempt_id}: status {r.status.value} must have reward {REWARD_FLOOR}")
