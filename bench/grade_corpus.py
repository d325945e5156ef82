"""Grade a corpus through the sealed grader, several times, and print one table per outcome group.

    python bench/grade_corpus.py --demo demo/attempts.jsonl --adversarial --experts --repeats 3 --out DIR

Sources: raw-attempt JSON lines (our format), the adversarial corpus (tests/adversarial/cases.json:
every cheat must end at the floor in every repeat, no honest kernel may be floored), and every Triton
expert graded as a candidate against itself (its reward should sit at 0).
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.contract import REWARD_FLOOR, GradeRequest  # noqa: E402


def demo_requests(path: Path) -> list[tuple[GradeRequest, dict]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            req = GradeRequest(attempt_id=rec["attempt_id"], task_id=rec["task_id"], source=rec["source"],
                               language=rec["language"], entry_point=rec.get("entry_point", "run"), timeout_s=60)
            out.append((req, {"group": "demo", "intended": (rec.get("extra") or {}).get("intended", "?")}))
    return out


def adversarial_requests(gpu_focus: bool = False) -> list[tuple[GradeRequest, dict]]:
    base = ROOT / "tests" / "adversarial"
    cases = json.loads((base / "cases.json").read_text())
    cases = cases["cases"] if isinstance(cases, dict) else cases
    if gpu_focus:  # GPU-only cheats, call-boundary escapes and library rules, honest kernels: what CPU CI cannot show
        cases = [c for c in cases if c.get("gpu_only") or _escape(c) or c.get("threat") is None]
    out = []
    for c in cases:
        src = (base / c["file"]).read_text()
        group = "honest" if c.get("threat") is None else "escape" if _escape(c) and not c.get("gpu_only") else "cheat"
        req = GradeRequest(attempt_id=f"adv:{c['file']}", task_id=c["task_id"], source=src, language=c["language"],
                           timeout_s=60)
        out.append((req, {"group": group, "threat": c.get("threat"), "expect": c.get("expect_status"),
                          "past_clip": c.get("past_clip", False)}))
    return out


BOUNDARY_REASONS = {"interpreter_state", "audit_channel", "dispatcher_escape", "library_compute", "protocol_forged",
                    "output_flood", "forbidden_op", "no_own_kernel"}
"""Reasons of the call boundary (GRADER.md), of the wire and of the library and own-kernel rules: planted on
CPU, their floors must hold on a CUDA build too (the ops and kernels a CUDA build runs are not the CPU's)."""


def _escape(case: dict) -> bool:
    """A call-boundary or wire escape, or a reach out of the sandbox (threat 22: namespaces, /proc, files)."""
    return case.get("threat") is not None and (case["threat"] == 22
                                               or bool(BOUNDARY_REASONS & set(case.get("expect_reasons", []))))


def expert_requests() -> list[tuple[GradeRequest, dict]]:
    from grader.catalogue import load_catalogue

    out = []
    for card in load_catalogue().values():
        if card.expert_kind == "triton":
            req = GradeRequest(attempt_id=f"expert:{card.task_id}", task_id=card.task_id, source=card.expert,
                               language="triton", timeout_s=120)
            out.append((req, {"group": "expert"}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo", type=Path, action="append", default=[])
    ap.add_argument("--adversarial", action="store_true")
    ap.add_argument("--gpu-focus", action="store_true", help="only GPU-only cheats and honest Triton kernels")
    ap.add_argument("--experts", action="store_true")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--mode", default="zygote")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip-gpu-only", action="store_true")
    args = ap.parse_args()
    from grader.service import GraderService

    items = [x for p in args.demo for x in demo_requests(p)]
    if args.adversarial:
        items += adversarial_requests(args.gpu_focus)
    if args.experts:
        items += expert_requests()
    meta = {req.attempt_id: m for req, m in items}
    runs: dict[str, list] = collections.defaultdict(list)
    t0 = time.perf_counter()
    live = None
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        live = open(args.out / "results.jsonl", "w")  # written as grades arrive: a cut-off run keeps them
    with GraderService(mode=args.mode, workers=args.workers) as svc:
        device = svc.device_name
        for rep in range(args.repeats):
            reqs = [GradeRequest(**{**req.__dict__, "seed": 1000 * rep + 17}) for req, _ in items]
            for i, r in enumerate(svc.grade(reqs), 1):
                runs[r.attempt_id].append(r)
                if live:
                    live.write(r.to_json() + "\n")
                    live.flush()
                    print(f"{r.attempt_id}\t{r.status.value}\t{r.reason_code.value}\t{r.reward:.3f}\t{r.reason[:80]}",
                          flush=True)
                if i % 20 == 0:
                    print(f"  repeat {rep + 1}: {i}/{len(reqs)} graded, {time.perf_counter() - t0:.0f} s",
                          file=sys.stderr)
    wall = time.perf_counter() - t0
    if live:
        live.close()
    report(runs, meta, device, wall, args.repeats)


def report(runs, meta, device, wall, repeats) -> None:
    print(f"device: {device}; attempts: {len(runs)}; repeats: {repeats}; wall: {wall:.0f} s")
    groups = collections.defaultdict(list)
    for aid, rs in runs.items():
        groups[meta[aid]["group"]].append((aid, rs))
    for group, rows in sorted(groups.items()):
        print(f"\n== {group} ({len(rows)} attempts x {repeats})")
        print("attempt\tstatuses\treasons\trewards (per repeat)")
        for aid, rs in sorted(rows):
            print(f"{aid}\t{','.join(sorted({r.status.value for r in rs}))}\t"
                  f"{','.join(sorted({r.reason_code.value for r in rs}))}\t"
                  + " ".join(f"{r.reward:.3f}" for r in rs) + f"\t{rs[-1].reason[:90]}")
    cheats = [rs for aid, rs in groups.get("cheat", [])]
    honest = [rs for aid, rs in groups.get("honest", [])]
    experts = [rs for aid, rs in groups.get("expert", [])]
    print("\n== summary")
    if cheats:
        floored = sum(all(r.reward == REWARD_FLOOR for r in rs) for rs in cheats)
        print(f"cheats floored in every repeat: {floored}/{len(cheats)}")
    if honest:
        never = sum(all(r.reward > REWARD_FLOOR for r in rs) for rs in honest)
        print(f"honest kernels never floored: {never}/{len(honest)}")
    if experts:
        rewards = [r.reward for rs in experts for r in rs]
        print(f"expert-as-candidate reward: median {statistics.median(rewards):.4f}, "
              f"max |reward| {max(abs(x) for x in rewards):.4f} over {len(rewards)} grades")
    statuses = collections.Counter(r.status.value for rs in runs.values() for r in rs)
    print("statuses:", dict(statuses))


if __name__ == "__main__":
    main()
