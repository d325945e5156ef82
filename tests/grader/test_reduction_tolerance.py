"""fp32 reductions are judged against an error scale that fits any summation order, and still fail
lower-precision arithmetic and wrong formulas.

Every card that declares an error scale for a reduction is checked here on CPU, at its cpu sizes and
its gpu sizes, with its own input generation (grader.inputs: make_inputs / resolve_specs) and its own
reference, error scale and tolerance, through the grader's comparison (grader.compare.compare):

- honest fp32 arithmetic in several summation orders must pass with a margin (worst |err| / bound
  below HONEST_MARGIN): sequential left-to-right accumulation, contiguous chunks of 64/256/1024
  summed then the partials summed, a 256-lane strided accumulator reduced by a tree at the end (what
  a Triton loop over BLOCK_N chunks does), a pairwise tree, and torch's own fp32 reduction;
- the same formula with fp16 or bf16 arithmetic (inputs cast down, every operation and accumulation
  in that dtype, result cast back), sequential or pairwise, must fail on every draw; so must TF32-like
  inputs for the GEMM (mantissa truncated to 10 bits), and, on cancelling draws, inputs rounded to
  10 bits with fp32 accumulation;
- genuinely wrong formulas (an element dropped from the reduction, N-1 divisors, ...) must fail
  wherever their deviation is within rtol's reach (an N-1 divisor changes a mean by 1/N relatively,
  below rtol = 1e-4 once N > 10^4: no scale can catch that, and the |ref| bound did not either).

Sizes: the reduction axis always keeps the card's full length (it alone sets the rounding); the
other axes of the gpu sizes are cut (ROW_CAP rows, XENT_ROW_CAP for the 32000-50257-wide logits, a
64 x 64 block of the GEMM output) to keep each case within seconds on two cores. Fewer rows lower the
maximum over rows: a Gaussian tail over 32768 rows instead of 256 reaches about 1.4x further, still
inside the honest margin.
Draws: seed 0, plus the seeds (of the first 2000) that draw the most cancelling mean (smallest
|mean| / rms, of the product for the GEMM: where |result| understates the rounding), the most
dominant mean and the widest spread (largest std: heavy-tailed exponentials). For cross-entropy the
cancelling and widest draws are also run with every target at its row's argmax ("stressed"), which
the card's draws produce in a few rows of most calls at V = 8192: the loss is then small while its
log-sum keeps the rounding of all V terms.

Measured with this file (`pytest -s` prints it): worst honest ratio (order, draw) / best
low-precision ratio / best must-fail wrong-formula ratio / worst honest ratio without the scale.
    row_sum_fp32               0.050 sequential, N=10007 cancelling  /  5.9 fp16 pairwise / 1.6  / 1.3
    col_mean_fp32              0.082 sequential, M=32768             /  2.2 fp16 pairwise / 3.7  / 0.082
    matmul_fp32                0.073 sequential, K=4000 cancelling   /  7.2 tf32 truncated / 12.7 / 0.041 (atol 4e-3)
    layernorm_fp32             0.040 sequential, N=8000              /  9.5 fp16 pairwise / 2.6  / 1.7
    log_softmax_rows_fp32      0.024 sequential, N=7000              /  8.7 fp16 pairwise / 13   / 1.2
    cross_entropy_fp32         0.154 sequential, V=50257 stressed    /  5.0 fp16 pairwise / 460  / 6.4
    cross_entropy_smooth_fp32  0.154 sequential, V=50257 stressed    /  5.2 fp16 pairwise / 104  / 0.84
With 512 rows (256 of the logits; the caps until 2026-12-02) the rows that differ were
    row_sum_fp32               0.054                                 /  5.9               / 1.6  / 3.8
    col_mean_fp32              0.096                                 /  2.1               / 3.7  / 0.096
    layernorm_fp32             0.041                                 /  9.5               / 2.5  / 2.4
    cross_entropy_smooth_fp32  0.154                                 /  5.2               / 115  / 0.84
and the others were as above: fewer rows lower the maxima a little, and every honest order keeps its margin.
With whole rows (exploration, not run here) the same orders reached 0.105 (row_sum, N=10007) without
the scale 7.6x sequential / 10x chunked / 1.8x torch.sum on cancelling draws; cross_entropy with
every target at the argmax reached 12.9x without and 0.17 with its scale at V=50257. The honest
but ill-conditioned LayerNorm with a one-pass variance (E[x^2] - mean^2) summed sequentially reaches
0.305 (0.226 over 256 rows): it must pass, without the margin. A sum(|terms|) scale (Higham's worst case) would let fp16
pairwise sums and rounded-TF32 GEMMs through on cancelling draws (last test below).

Known limit, left as is: TF32 inputs rounded to nearest with fp32 accumulation pass the GEMM on draws
whose entries are dominated by the means (best 0.22 of the bound there; |ref| ~ K * mean_a * mean_b,
relative error ~2^-12 / sqrt(K)), with this scale as with the former atol 4e-3; no scale can change
that, only rtol (about 2e-5, which would put honest sequential GEMMs near 0.4 of the bound). They
fail on cancelling draws (9.7x or more), which fresh means bring in most grades.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch

from grader.catalogue import load_catalogue
from grader.compare import compare
from grader.inputs import make_inputs, resolve_specs
from grader.modload import load_source
from grader.taskcard import size_key

CATALOGUE = load_catalogue()
HONEST_MARGIN = 0.3
ROW_CAP = 256
XENT_ROW_CAP = 128  # rows of up to 50257 logits
GEMM_BLOCK = 64
SEARCH_SEEDS = range(2000)

# ---------------------------------------------------------------- summation orders
# Each reduces the last axis of a 2-D tensor in that tensor's dtype (every addition rounds to it).
Reduce = Callable[[torch.Tensor], torch.Tensor]


def _pad(t: torch.Tensor, multiple: int) -> torch.Tensor:
    extra = -t.shape[-1] % multiple
    return torch.nn.functional.pad(t, (0, extra)) if extra else t


def _running_total(t: torch.Tensor, dim: int) -> torch.Tensor:
    """The last of the running totals of `t` along `dim`, every addition rounded to t's dtype, left to right.

    numpy's add.accumulate is that loop in C for float32 and float16 (each prefix is the previous one plus
    the next element, in the array's dtype; unlike add.reduce it never sums pairwise), bit for bit what one
    torch add_ per element gives (test_running_total_is_the_python_loop below). numpy has no bfloat16,
    so that dtype keeps the loop. (torch.cumsum cannot stand in: on CPU it accumulates float32 in double.)
    Along an axis that is not the innermost one (a lane accumulator's), add.reduce is that same loop too, and
    vectorised across the innermost axis: numpy sums pairwise only along the fast axis in memory, so it is used
    there (30x faster for lanes256) while the innermost axis holds more than one element."""
    if t.dtype in (torch.float32, torch.float16):
        a = t.numpy()
        if dim not in (-1, a.ndim - 1) and a.shape[-1] > 1:
            return torch.from_numpy(np.add.reduce(a, axis=dim))
        return torch.from_numpy(np.add.accumulate(a, axis=dim).take(-1, axis=dim))
    return _running_total_loop(t, dim)


def _running_total_loop(t: torch.Tensor, dim: int) -> torch.Tensor:
    steps = t.movedim(dim, 0).contiguous()
    acc = steps[0].clone()
    for j in range(1, steps.shape[0]):
        acc.add_(steps[j])
    return acc


def sequential(t: torch.Tensor) -> torch.Tensor:
    """Left to right, one running total per row."""
    return _running_total(t, 1)


def pairwise(t: torch.Tensor) -> torch.Tensor:
    t = _pad(t, 1 << max(0, t.shape[-1] - 1).bit_length())
    while t.shape[-1] > 1:
        half = t.shape[-1] // 2
        t = t[:, :half] + t[:, half:]
    return t[:, 0]


def chunked(block: int) -> Reduce:
    """Contiguous blocks summed sequentially, then the block sums summed sequentially."""
    def reduce(t: torch.Tensor) -> torch.Tensor:
        t = _pad(t, block)
        rows, n = t.shape
        partial = sequential(t.reshape(rows * (n // block), block)).reshape(rows, n // block)
        return sequential(partial)
    return reduce


def lanes(width: int) -> Reduce:
    """A width-lane accumulator: lane j adds elements j, j + width, ... sequentially, then a tree
    adds the lanes (a Triton loop over BLOCK_N chunks into a [BLOCK_N] fp32 vector, then tl.sum)."""
    def reduce(t: torch.Tensor) -> torch.Tensor:
        t = _pad(t, width)
        rows, n = t.shape
        return pairwise(_running_total(t.reshape(rows, n // width, width), 1))
    return reduce


def torch_sum(t: torch.Tensor) -> torch.Tensor:
    return t.sum(dim=-1)


HONEST_ORDERS: dict[str, Reduce] = {
    "sequential": sequential, "chunks64": chunked(64), "chunks256": chunked(256), "chunks1024": chunked(1024),
    "lanes256": lanes(256), "pairwise": pairwise, "torch": torch_sum,
}
# torch.sum of a half tensor accumulates in float32 on CPU, so the low-precision variants use only
# the explicit orders, where every addition rounds to the narrow dtype.
LOW_ORDERS: dict[str, Reduce] = {"sequential": sequential, "pairwise": pairwise}
LOW_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def mantissa(x: torch.Tensor, bits: int = 10, nearest: bool = True) -> torch.Tensor:
    """fp32 values cut to `bits` explicit mantissa bits (TF32 keeps 10), rounded or truncated."""
    drop = 23 - bits
    i = x.contiguous().view(torch.int32)
    if nearest:
        i = i + (1 << (drop - 1))
    return (i & ~((1 << drop) - 1)).view(torch.float32)


# ---------------------------------------------------------------- the cards' formulas
# Each `impl(inputs, reduce, dtype)` computes the card's output with every operation in `dtype` and
# every reduction over the card's reduced axis through `reduce`.


def _row_sum(ins, reduce, dt):
    (x,) = ins
    return reduce(x.to(dt)).float()


def _col_mean(ins, reduce, dt):
    (x,) = ins
    return (reduce(x.t().contiguous().to(dt)) * (1.0 / x.shape[0])).float()


def _matmul(ins, reduce, dt):
    a, b = (t.to(dt) for t in ins)
    products = (a[:, None, :] * b.t()[None, :, :]).reshape(-1, a.shape[1])
    return reduce(products).reshape(a.shape[0], b.shape[1]).float()


def _layernorm(ins, reduce, dt):
    x, w, b = (t.to(dt) for t in ins)
    n = x.shape[-1]
    mean = reduce(x) / n
    xc = x - mean[:, None]
    rstd = torch.rsqrt(reduce(xc * xc) / n + 1e-5)
    return (xc * rstd[:, None] * w + b).float()


def _layernorm_one_pass(ins, reduce, dt):
    """Variance as E[x^2] - mean^2 (one pass over the row): honest, and worse conditioned."""
    x, w, b = (t.to(dt) for t in ins)
    n = x.shape[-1]
    mean = reduce(x) / n
    rstd = torch.rsqrt(reduce(x * x) / n - mean * mean + 1e-5)
    return ((x - mean[:, None]) * rstd[:, None] * w + b).float()


def _log_softmax(ins, reduce, dt):
    (x,) = ins
    x = x.to(dt)
    shifted = x - x.amax(dim=-1, keepdim=True)
    return (shifted - torch.log(reduce(torch.exp(shifted)))[:, None]).float()


def _cross_entropy(ins, reduce, dt, smoothing=0.0):
    logits, target = ins
    x = logits.to(dt)
    top = x.amax(dim=-1)
    lse = top + torch.log(reduce(torch.exp(x - top[:, None])))
    picked = x.gather(1, target[:, None])[:, 0]
    if smoothing:
        return (lse - (1 - smoothing) * picked - smoothing * (reduce(x) / x.shape[-1])).float()
    return (lse - picked).float()


def _xent_smooth(ins, reduce, dt):
    return _cross_entropy(ins, reduce, dt, 0.1)


# ---------------------------------------------------------------- cases


@dataclass
class Wrong:
    fn: Callable[[list], torch.Tensor]
    reach: Callable[[dict], bool] = lambda size: True
    """Sizes at which the deviation is within rtol's reach (the check must catch it there)."""


@dataclass
class Case:
    task_id: str
    impl: Callable
    cut: dict[str, int]
    """Caps on the axes that are not reduced (gpu sizes), to keep each case within seconds."""
    wrong: dict[str, Wrong]
    honest_extra: dict[str, Callable[[list], torch.Tensor]] = field(default_factory=dict)
    honest_unmargined: dict[str, Callable[[list], torch.Tensor]] = field(default_factory=dict)
    """Honest but ill-conditioned formulations: they must pass, not necessarily with the margin."""
    low_extra: dict[str, Callable[[list], torch.Tensor]] = field(default_factory=dict)
    low_cancelling: dict[str, Callable[[list], torch.Tensor]] = field(default_factory=dict)
    """Lower precision that only cancelling draws can expose (the |ref| term dominates elsewhere):
    it must fail there, and its best ratio elsewhere is reported."""
    floored_before: bool = False
    """Whether the |ref| bound (the card's tolerance before its scale) floored an honest order."""
    before: tuple[float, float] | None = None
    """(atol, rtol) the card had before its scale, where it differs from today's."""
    stress: Callable[[list], list] | None = None
    """Inputs the card's draws reach only in some calls, where the honest error is largest (checked
    on the cancelling and the widest draws)."""


def _tf32(ins, nearest):
    a, b = (mantissa(t, 10, nearest) for t in ins)
    return a @ b


def _argmax_targets(ins):
    logits, _ = ins
    return [logits, logits.argmax(dim=-1)]


def _ln_ref(stats_of, ins, centre=True, bias=True, ddof=0):
    """LayerNorm of ins[0] with the statistics of `stats_of`, in the inputs' own precision."""
    x, w, b = ins
    mean = stats_of.mean(-1, keepdim=True)
    var = stats_of.var(-1, correction=ddof, keepdim=True)
    y = (x - mean if centre else x) * torch.rsqrt(var + 1e-5) * w
    return y + b if bias else y


CASES = {c.task_id: c for c in [
    Case("row_sum_fp32", _row_sum, {"M": ROW_CAP}, floored_before=True,
         wrong={"drops the last element": Wrong(lambda ins: ins[0][:, :-1].sum(-1))}),
    Case("col_mean_fp32", _col_mean, {"N": ROW_CAP},
         wrong={
             # Off by one row: error (x_M - mean) / M against rtol * |mean|.
             "drops the last row": Wrong(lambda ins: ins[0][:-1].sum(0) / ins[0].shape[0],
                                         reach=lambda s: s["M"] <= 2048),
             "divides by M - 1": Wrong(lambda ins: ins[0].sum(0) / (ins[0].shape[0] - 1),
                                       reach=lambda s: s["M"] <= 2048),
             "sums instead of averaging": Wrong(lambda ins: ins[0].sum(0)),
         }),
    Case("matmul_fp32", _matmul, {"M": GEMM_BLOCK, "N": GEMM_BLOCK}, before=(4e-3, 1e-4),
         wrong={"drops the last k": Wrong(lambda ins: ins[0][:, :-1] @ ins[1][:-1])},
         honest_extra={"torch.matmul": lambda ins: ins[0] @ ins[1]},
         low_extra={"tf32 truncated": lambda ins: _tf32(ins, False)},
         # Rounded TF32 inputs with fp32 accumulation miss by ~2^-12 * ||products||_2 at random: above
         # rtol * ||products||_2, below rtol * |ref| where K * mean_a * mean_b dominates an entry.
         low_cancelling={"tf32 rounded": lambda ins: _tf32(ins, True)}),
    Case("layernorm_fp32", _layernorm, {"M": ROW_CAP}, floored_before=True,
         wrong={
             "mean not subtracted": Wrong(lambda ins: _ln_ref(ins[0], ins, centre=False)),
             "bias dropped": Wrong(lambda ins: _ln_ref(ins[0], ins, bias=False)),
             # Statistics of N - 1 elements move the mean by about std / N and the variance by 1/N.
             "statistics over N - 1 elements": Wrong(lambda ins: _ln_ref(ins[0][:, :-1], ins),
                                                     reach=lambda s: s["N"] <= 1024),
             "unbiased variance": Wrong(lambda ins: _ln_ref(ins[0], ins, ddof=1), reach=lambda s: s["N"] <= 1024),
         },
         honest_extra={"one-pass variance, pairwise": lambda ins: _layernorm_one_pass(ins, pairwise, torch.float32)},
         # E[x^2] - mean^2 cancels (|mean| / std up to 4 loses 4 bits) and a sequential sum adds its
         # sqrt(N) growth: measured 0.30 of the bound at N = 5120, passing without the margin.
         honest_unmargined={"one-pass variance, sequential": lambda ins: _layernorm_one_pass(ins, sequential,
                                                                                             torch.float32)}),
    Case("log_softmax_rows_fp32", _log_softmax, {"M": ROW_CAP}, floored_before=True,
         wrong={
             "max not subtracted": Wrong(lambda ins: ins[0] - torch.logsumexp(ins[0] - ins[0].amax(-1, keepdim=True),
                                                                               -1, keepdim=True)),
             "log of the mean, not the sum": Wrong(lambda ins: torch.log_softmax(ins[0], -1)
                                                   + math.log(ins[0].shape[-1])),
             # One term short: shifts the row by about exp(x_N - max) / sum, ~1/N.
             "sum one term short": Wrong(lambda ins: ins[0] - torch.logsumexp(ins[0][:, :-1], -1, keepdim=True),
                                         reach=lambda s: s["N"] <= 1024),
         }),
    Case("cross_entropy_fp32", _cross_entropy, {"M": XENT_ROW_CAP}, floored_before=True,
         wrong={"target off by one": Wrong(lambda ins: torch.nn.functional.cross_entropy(
                    ins[0], (ins[1] + 1) % ins[0].shape[1], reduction="none")),
                "max not added back to the log-sum": Wrong(lambda ins: torch.logsumexp(ins[0], -1) - ins[0].amax(-1)
                                                  - ins[0].gather(1, ins[1][:, None])[:, 0])},
         stress=_argmax_targets),
    Case("cross_entropy_smooth_fp32", _xent_smooth, {"M": XENT_ROW_CAP},
         wrong={"smoothing left out": Wrong(lambda ins: torch.nn.functional.cross_entropy(
                    ins[0], ins[1], reduction="none")),
                "target off by one": Wrong(lambda ins: torch.nn.functional.cross_entropy(
                    ins[0], (ins[1] + 1) % ins[0].shape[1], reduction="none", label_smoothing=0.1))},
         stress=_argmax_targets),
]}


# ---------------------------------------------------------------- the checks


def _drawn(card, seed: int) -> list[tuple[float, float]]:
    """(mean, std) of each normal input as make_inputs draws them: random.Random(seed), a mean then a
    std per normal input, in order. Only used to pick seeds; a change there only changes the picks."""
    params, out = random.Random(seed), []
    for spec in card.inputs:
        if spec.dist == "normal":
            out.append((params.uniform(*spec.mean), params.uniform(*spec.std)))
    return out


def _seeds(card, case: Case) -> dict[str, int]:
    leading = 2 if case.task_id == "matmul_fp32" else 1  # a GEMM entry's mean is mean_a * mean_b

    def dominance(seed):  # |mean| / rms of the (product of the) leading inputs
        return math.prod(abs(m) / math.hypot(m, s) for m, s in _drawn(card, seed)[:leading])

    return {"seed 0": 0,
            "cancelling": min(SEARCH_SEEDS, key=dominance),
            "dominant mean": max(SEARCH_SEEDS, key=dominance),
            "widest spread": max(SEARCH_SEEDS, key=lambda seed: _drawn(card, seed)[0][1])}


def _sizes(card, case: Case) -> list[tuple[str, dict[str, int]]]:
    out = []
    for profile in ("cpu", "gpu"):
        for size, hidden in card.sizes(profile):
            cut = {k: min(v, case.cut.get(k, v)) for k, v in size.items()}
            label = f"{profile}{'/hidden' if hidden else ''} {size_key(size)}" + (" (cut)" if cut != size else "")
            out.append((label, cut))
    return out


@dataclass
class Tally:
    honest: tuple[float, str] = (0.0, "")
    honest_before: tuple[float, str] = (0.0, "")
    low: tuple[float, str] = (math.inf, "")
    unmargined: tuple[float, str] = (0.0, "")
    low_cancelling: tuple[float, str] = (math.inf, "")
    low_cancelling_there: tuple[float, str] = (math.inf, "")
    wrong: tuple[float, str] = (math.inf, "")
    failures: list[str] = field(default_factory=list)

    def see_honest(self, ratio: float, before: float, where: str) -> None:
        if ratio > self.honest[0]:
            self.honest = (ratio, where)
        if before > self.honest_before[0]:
            self.honest_before = (before, where)

    def see_unmargined(self, ratio: float, where: str) -> None:
        if ratio > self.unmargined[0]:
            self.unmargined = (ratio, where)

    def see_low_cancelling(self, ratio: float, where: str) -> None:
        if ratio < self.low_cancelling[0]:
            self.low_cancelling = (ratio, where)
        if "cancelling" in where and ratio < self.low_cancelling_there[0]:
            self.low_cancelling_there = (ratio, where)

    def see_wrong(self, ratio: float, where: str) -> None:
        if ratio < self.wrong[0]:
            self.wrong = (ratio, where)

    def see_low(self, ratio: float, where: str) -> None:
        if ratio < self.low[0]:
            self.low = (ratio, where)


def _judge(case: Case, card, ins: list, where: str, tally: Tally, wrong: dict[str, Wrong] | None, size) -> None:
    atol, rtol = card.tolerance()
    b_atol, b_rtol = case.before or (atol, rtol)
    wide = [t.double() if t.is_floating_point() else t for t in ins]
    ref = load_source(card.reference, f"kt_ref_{card.task_id}", _WORKDIR).run(*wide)
    scale = load_source(card.error_scale, f"kt_scale_{card.task_id}", _WORKDIR).run(*wide)

    before_bound = b_atol + b_rtol * ref.abs()

    def check(out):
        return compare(out, ref, atol, rtol, scale)

    honest = {name: (lambda o=order: case.impl(ins, o, torch.float32)) for name, order in HONEST_ORDERS.items()}
    honest |= {name: (lambda f=fn: f(ins)) for name, fn in case.honest_extra.items()}
    for name, run in honest.items():
        out = run()
        verdict = check(out)
        before = float(((out.double() - ref).abs_() / before_bound).max())  # without the scale
        tally.see_honest(verdict.max_rel_err, before, f"{name}, {where}")
        if not verdict.ok or verdict.max_rel_err >= HONEST_MARGIN:
            tally.failures.append(f"honest {name} at {where}: {verdict.detail}")
    for name, fn in case.honest_unmargined.items():
        verdict = check(fn(ins))
        tally.see_unmargined(verdict.max_rel_err, f"{name}, {where}")
        if not verdict.ok:
            tally.failures.append(f"honest {name} at {where}: {verdict.detail}")
    low = {f"{d} {o}": (lambda dt=dt, order=order: case.impl(ins, order, dt))
           for d, dt in LOW_DTYPES.items() for o, order in LOW_ORDERS.items()}
    low |= {name: (lambda f=fn: f(ins)) for name, fn in case.low_extra.items()}
    for name, run in low.items():
        verdict = check(run())
        tally.see_low(verdict.max_rel_err, f"{name}, {where}")
        if verdict.ok:
            tally.failures.append(f"low precision {name} passed at {where}: {verdict.detail}")
    for name, fn in case.low_cancelling.items():
        verdict = check(fn(ins))
        tally.see_low_cancelling(verdict.max_rel_err, f"{name}, {where}")
        if verdict.ok and "cancelling" in where:
            tally.failures.append(f"low precision {name} passed at {where}: {verdict.detail}")
    for name, w in (wrong or {}).items():
        verdict = check(w.fn(wide))
        if w.reach(size):
            tally.see_wrong(verdict.max_rel_err, f"{name}, {where}")
        if verdict.ok and w.reach(size):
            tally.failures.append(f"wrong formula '{name}' passed at {where}: {verdict.detail}")


_WORKDIR = None


@pytest.fixture(scope="module", autouse=True)
def _workdir(tmp_path_factory):
    global _WORKDIR
    _WORKDIR = str(tmp_path_factory.mktemp("scales"))
    yield


def test_every_reduction_card_with_an_error_scale_is_covered():
    # The scan's scale has its own test (test_grader_unit); every other card with a scale is a reduction.
    with_scale = {t for t, c in CATALOGUE.items() if c.error_scale and c.family != "scan"}
    assert with_scale == set(CASES)
    assert all(CATALOGUE[t].output_dtype == "float32" for t in CASES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_running_total_is_the_python_loop(dtype):
    """The running totals below come from numpy's accumulate: the same numbers, bit for bit, as one torch
    add_ per element in the tensor's dtype (cancelling and one-signed rows, long and short, both axes)."""
    gen = torch.Generator().manual_seed(7)
    for shape, dim in [((7, 5000), 1), ((3, 1), 1), ((33, 257), 1), ((4, 40, 256), 1), ((3, 2000, 2), 1),
                       ((5, 3000, 1), 1), ((300, 6), 0), ((3000, 1), 0)]:
        for mean in (0.0, 3.0):
            t = (torch.randn(shape, generator=gen) * 2 + mean).to(dtype)
            assert torch.equal(_running_total(t, dim), _running_total_loop(t, dim)), (shape, dim, mean)


@pytest.mark.slow
@pytest.mark.parametrize("task_id", sorted(CASES))
def test_error_scale_passes_honest_orders_and_fails_low_precision(task_id: str):
    case, card = CASES[task_id], CATALOGUE[task_id]
    tally = Tally()
    seeds = _seeds(card, case)
    for label, size in _sizes(card, case):
        for draw, seed in seeds.items():
            ins = make_inputs(resolve_specs(card, size), seed, "cpu")
            _judge(case, card, ins, f"{label}, {draw}", tally, case.wrong, size)
            if case.stress is not None and draw in ("cancelling", "widest spread"):
                _judge(case, card, case.stress(ins), f"{label}, {draw}, stressed", tally, None, size)
    print(f"\n[{task_id}] worst honest {tally.honest[0]:.3g} ({tally.honest[1]}); "
          f"under the bound without the scale it was {tally.honest_before[0]:.3g} ({tally.honest_before[1]})"
          f"\n[{task_id}] best low precision {tally.low[0]:.3g} ({tally.low[1]})"
          f"\n[{task_id}] best wrong formula {tally.wrong[0]:.3g} ({tally.wrong[1]})"
          + (f"\n[{task_id}] worst ill-conditioned honest {tally.unmargined[0]:.3g} ({tally.unmargined[1]})"
             if case.honest_unmargined else "")
          + (f"\n[{task_id}] best of {', '.join(case.low_cancelling)} on any draw {tally.low_cancelling[0]:.3g}"
             f" ({tally.low_cancelling[1]}); on cancelling draws {tally.low_cancelling_there[0]:.3g}"
             f" ({tally.low_cancelling_there[1]})" if case.low_cancelling else ""))
    assert not tally.failures, "\n".join(tally.failures)
    # The scale is there because the bound without it floors honest arithmetic (or, for the GEMM,
    # replaces a fixed atol that honest arithmetic never came near); where it did not, it costs nothing.
    assert (tally.honest_before[0] > 1.0) == case.floored_before, tally.honest_before


def test_a_sum_of_magnitudes_scale_would_let_low_precision_through():
    """Why the sums are scaled by the 2-norm of their terms and not by sum(|terms|), Higham's
    worst-case magnitude: on a cancelling draw an fp16 pairwise row sum and a GEMM with rounded TF32
    inputs pass a sum(|terms|) scale, while the cards' scales fail both. (Honest orders pass either.)"""
    def l1_row_sum(x):
        return x.abs().sum(dim=-1)

    def l1_matmul(a, b):
        return a.abs() @ b.abs()

    for task_id, size, low, l1 in [
        ("row_sum_fp32", {"M": ROW_CAP, "N": 10007}, lambda ins: _row_sum(ins, pairwise, torch.float16), l1_row_sum),
        ("matmul_fp32", {"M": GEMM_BLOCK, "N": GEMM_BLOCK, "K": 4096}, lambda ins: _tf32(ins, True), l1_matmul),
    ]:
        card, case = CATALOGUE[task_id], CASES[task_id]
        atol, rtol = card.tolerance()
        ins = make_inputs(resolve_specs(card, size), _seeds(card, case)["cancelling"], "cpu")
        wide = [t.double() for t in ins]
        ref = load_source(card.reference, f"kt_ref_{task_id}", _WORKDIR).run(*wide)
        scale = load_source(card.error_scale, f"kt_scale_{task_id}", _WORKDIR).run(*wide)
        out = low(ins)
        assert compare(out, ref, atol, rtol, l1(*wide)).ok, task_id
        assert not compare(out, ref, atol, rtol, scale).ok, task_id
