"""Correctness: every element of the candidate's output against a float64 reference."""
from __future__ import annotations

import math
from dataclasses import dataclass

from grader.contract import Reason


@dataclass(frozen=True)
class Verdict:
    """Outcome of one output comparison."""

    ok: bool
    reason_code: Reason
    detail: str
    max_rel_err: float
    """Largest |out-ref| / (atol + rtol*|ref|); <= 1 passes."""


def check_output_meta(meta: dict, shape: tuple[int, ...], dtype: str, device_ok: bool) -> Verdict | None:
    """The output must be a plain tensor of the declared shape, dtype and device."""
    if meta.get("type") != "Tensor":
        return Verdict(False, Reason.BAD_OUTPUT, f"output is {meta.get('type')!r}, not a plain torch.Tensor", float("inf"))
    if tuple(meta["shape"]) != tuple(shape):
        return Verdict(False, Reason.BAD_OUTPUT, f"output shape {tuple(meta['shape'])} != expected {tuple(shape)}", float("inf"))
    if meta["dtype"] != dtype:
        return Verdict(False, Reason.BAD_OUTPUT, f"output dtype {meta['dtype']} != expected {dtype}", float("inf"))
    if not device_ok:
        return Verdict(False, Reason.BAD_OUTPUT, f"output on device {meta.get('device')!r}, not the grading device", float("inf"))
    return None


def compare(out, ref, atol: float, rtol: float, scale=None, slack: float = 0.0) -> Verdict:
    """All elements must satisfy |out-ref| <= atol + rtol*max(|ref|, scale) + slack; NaN/Inf only where the
    reference has them. `scale` (float64, the output's shape) is the card's error scale, if any; `slack` an
    absolute allowance the caller measured (see `expert_slack`)."""
    import torch

    if _in_chunks(out, ref, scale):
        worst = _worst_in_chunks(out, ref, atol, rtol, scale, slack)
        if worst <= 1.0:  # a pass: the whole ratio is needed only to count a failure's elements
            return _passed(out.numel(), worst, atol, rtol, slack)
    o = out.to(ref.device).double() if out.is_floating_point() or ref.is_floating_point() else out.to(ref.device)
    r = ref.double() if o.dtype == torch.float64 else ref
    if o.numel() == 0:
        return Verdict(True, Reason.OK, "empty output", 0.0)
    if o.dtype != torch.float64:  # integer outputs: exact
        bad = int((o != r).sum())
        if bad:
            return Verdict(False, Reason.MISMATCH, f"{bad} of {o.numel()} integer elements differ", float("inf"))
        return Verdict(True, Reason.OK, "all integer elements equal", 0.0)
    ratio = _ratio(o, r, atol, rtol, None if scale is None else scale.to(r.device).double(), slack)
    worst = float(ratio.max())  # NaN if any ratio is: a non-finite output or reference, or 0 / 0
    if not math.isfinite(worst):
        return _compare_with_specials(o, r, atol, rtol, scale, slack)
    return _judged(o, r, ratio, worst, atol, rtol, slack)


CHUNK = 1 << 18
"""Elements per piece of a comparison on the host (`_worst_in_chunks`): 2 MiB of float64 per buffer, so a piece's
seven passes stay in the core's cache. Whole, a 16M-element output's passes each go through memory (measured on
this project's CPU machine, one thread: 381 ms whole, 39 ms in pieces of this size)."""


def _ratio(o, r, atol: float, rtol: float, s, slack: float):
    """|o - r| / (atol + rtol * max(|r|, |s|) + slack) elementwise, in float64, rounded as `compare` always has."""
    import torch

    diff = (o - r).abs_()
    magnitude = r.abs() if s is None else torch.maximum(r.abs(), s.abs())
    bound = magnitude.mul_(rtol).add_(atol)  # atol + rtol * magnitude, rounded as written, in place
    if slack:
        bound.add_(slack)
    return diff.div_(bound)


def _in_chunks(out, ref, scale) -> bool:
    """Whether `compare` first looks for the worst ratio piece by piece (`_worst_in_chunks`): large float outputs
    on the host, of the reference's shape (and the scale's), where nothing broadcasts."""
    return (out.device.type == ref.device.type == "cpu" and out.is_floating_point() and ref.is_floating_point()
            and out.numel() > CHUNK and out.shape == ref.shape and (scale is None or scale.shape == ref.shape))


def _worst_in_chunks(out, ref, atol: float, rtol: float, scale, slack: float) -> float:
    """The largest ratio of `compare` (NaN where any is), one cache-sized piece at a time with the same float64
    arithmetic element by element (each piece is widened exactly into float64 buffers first): the maximum of the
    pieces' maxima is the whole's."""
    import torch

    o, r = out.reshape(-1), ref.reshape(-1)
    s = scale.reshape(-1) if scale is not None else None
    n = o.numel()
    diff, mag = torch.empty(CHUNK, dtype=torch.float64), torch.empty(CHUNK, dtype=torch.float64)
    worst = 0.0
    for i in range(0, n, CHUNK):
        k = min(CHUNK, n - i)
        d, m = diff[:k], mag[:k]
        d.copy_(o[i:i + k]).sub_(r[i:i + k]).abs_()  # r's piece widened too, if it is not float64
        m.copy_(r[i:i + k]).abs_()
        if s is not None:
            torch.maximum(m, s[i:i + k].double().abs(), out=m)
        m.mul_(rtol).add_(atol)
        if slack:
            m.add_(slack)
        got = float(d.div_(m).max())
        if not got <= worst:  # larger, or NaN: a NaN anywhere is the whole's answer
            worst = got
            if math.isnan(got):
                break
    return worst


def _compare_with_specials(o, r, atol: float, rtol: float, scale, slack: float) -> Verdict:
    """`compare` where some output, reference or bound is not finite: NaN and Inf must match the reference's."""
    import torch

    r_finite = torch.isfinite(r)
    o_finite = torch.isfinite(o)
    if bool((~o_finite & r_finite).any()):
        n_nan = int((torch.isnan(o) & r_finite).sum())
        n_bad = int((~o_finite & r_finite).sum())
        code = Reason.UNWRITTEN if n_nan == n_bad else Reason.NONFINITE
        what = "poisoned (unwritten)" if code is Reason.UNWRITTEN else "NaN/Inf"
        return Verdict(False, code, f"{n_bad} of {o.numel()} elements are {what} where the reference is finite", float("inf"))
    if bool((~r_finite).any()):
        same_special = torch.where(~r_finite, (o == r) | (torch.isnan(o) & torch.isnan(r)), torch.ones_like(r_finite))
        if not bool(same_special.all()):
            return Verdict(False, Reason.MISMATCH, "non-finite reference elements not reproduced", float("inf"))
    diff = (o - r).abs()
    magnitude = r.abs() if scale is None else torch.maximum(r.abs(), scale.to(r.device).double().abs())
    bound = atol + rtol * magnitude + slack
    ratio = torch.where(r_finite, diff / bound, torch.zeros_like(diff))
    return _judged(o, r, ratio, float(ratio.max()), atol, rtol, slack)


def _judged(o, r, ratio, worst: float, atol: float, rtol: float, slack: float) -> Verdict:
    bounds = _bounds(atol, rtol, slack)
    if worst > 1.0:
        n_bad = int((ratio > 1.0).sum())
        if o.numel() > 1 and float(r.std()) > 0 and float(o.std()) == 0.0:
            return Verdict(False, Reason.CONSTANT_OUTPUT,
                           f"output is constant ({float(o.flatten()[0]):.4g}) while the reference varies", worst)
        return Verdict(False, Reason.MISMATCH,
                       f"{n_bad} of {o.numel()} elements outside {bounds} (worst {worst:.3g}x the bound)",
                       worst)
    return _passed(o.numel(), worst, atol, rtol, slack)


def _passed(n: int, worst: float, atol: float, rtol: float, slack: float) -> Verdict:
    return Verdict(True, Reason.OK, f"all {n} elements within {_bounds(atol, rtol, slack)} (worst {worst:.3g}x the "
                                    "bound)", worst)


def _bounds(atol: float, rtol: float, slack: float) -> str:
    return f"atol={atol:g}, rtol={rtol:g}" + (f", slack={slack:.3g}" if slack else "")


EXPERT_SLACK = 16.0
"""How many times the expert's own worst error a candidate may err by, on the same inputs, where the card's
tolerance alone is tighter than honest float arithmetic gets: long fp32 dot products whose outputs cancel to
near zero (H200 run 20, KernelBench L1:T1 and L1:T3: the expert's own cuBLAS call fails the same bound).
Measured on the CPU (tests/grader/test_expert_slack.py, 64x64 outputs, K 256-4096, means 0.05-1): a
one-product-at-a-time fp32 sum, as a naive kernel's thread does, errs 1.6-12.5x the blocked library GEMM's
worst; TF32 or fp16 operands 78-950x. On the GPU the expert (cuBLAS) itself sums along K in order."""


def expert_slack(expert_out, ref, rtol: float) -> float:
    """EXPERT_SLACK times the expert's largest |out-ref| where both are finite: the absolute allowance
    `compare` adds for a candidate graded on the same inputs. 0 for an exact expert or a non-float output.
    Never more than rtol times the largest |ref|, what the card grants its largest element anyway: an expert
    that errs beyond that (a wrong expert, an ill-conditioned task) widens nothing further."""
    import torch

    if not (expert_out.is_floating_point() and ref.is_floating_point()) or expert_out.shape != ref.shape:
        return 0.0
    e, r = expert_out.to(ref.device).double(), ref.double()
    both = torch.isfinite(e) & torch.isfinite(r)
    if not bool(both.any()):
        return 0.0
    err = float((e - r).abs()[both].max())
    return min(EXPERT_SLACK * err, rtol * float(r.abs()[both].max()))
