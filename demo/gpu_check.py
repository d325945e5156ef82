"""Check the corpus labels on a CUDA device: a quick, unsealed look, not a grade.

    python3 demo/gpu_check.py [--out FILE] [--only SUBSTRING] [--intents correct_,wrong_output]

For every attempt whose intent is not a cheat, crash or hang (those need the sealed grader's
isolation): honest candidates must match the card's float64 reference on the first public and the
first hidden GPU size, and are timed against the card's expert on the public one (CUDA events, after
a warm-up, median of a few calls); wrong_output candidates must miss on at least one GPU size;
compile_error and runtime_error candidates must raise. One JSON line per attempt; a summary at the end.
The labels correct_fast / correct_slow are the expected speed on this profile: this is how to see them.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SKIP = ("cheat:", "crash", "hang")


def _load(path: Path, source: str):
    path.write_text(source)  # Triton's JIT reads kernel source from a real file
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _time_ms(fn, inputs, budget_s: float = 0.25) -> float:
    import torch

    fn(*inputs)
    torch.cuda.synchronize()
    times: list[float] = []
    t_end = time.perf_counter() + budget_s
    while len(times) < 3 or (time.perf_counter() < t_end and len(times) < 25):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        fn(*inputs)
        b.record()
        torch.cuda.synchronize()  # whole device: work on other streams counts too
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def check(row, card, tmp: Path) -> dict:
    import torch

    from grader.compare import compare
    from grader.inputs import make_inputs, resolve_specs, upcast

    kind = row["extra"]["intended"]
    out = {"attempt_id": row["attempt_id"], "task_id": row["task_id"], "intended": kind}
    ref = _load(tmp / f"ref_{row['task_id']}.py", card.reference).run
    if kind.startswith("correct"):
        sizes = [card.public_sizes["gpu"][0], card.hidden_sizes["gpu"][0]]
    else:  # a wrong kernel may be right on some sizes (power-of-two widths): try them all until one misses
        sizes = [s for s, _ in card.sizes("gpu")]
    try:
        mod = _load(tmp / f"cand_{abs(hash(row['attempt_id'])) % 10**8}.py", row["source"])
        run = getattr(mod, row["entry_point"])
        verdicts = []
        for i, size in enumerate(sizes):
            inputs = make_inputs(resolve_specs(card, size), 1000 + i, "cuda")
            expect = ref(*upcast([t.clone() for t in inputs]))
            got = run(*inputs)
            torch.cuda.synchronize()
            ok = (type(got) is torch.Tensor and tuple(got.shape) == tuple(expect.shape)
                  and str(got.dtype) == f"torch.{card.output_dtype}" and compare(got, expect, *card.tolerance()).ok)
            verdicts.append(ok)
            if not ok:
                break
            if i == 0 and kind.startswith("correct") and ok:
                expert = _load(tmp / f"expert_{row['task_id']}.py", card.expert).run
                out["cand_ms"] = _time_ms(run, inputs)
                out["expert_ms"] = _time_ms(expert, inputs)
                out["speedup"] = out["expert_ms"] / out["cand_ms"]
            del inputs, expect, got
        out["outcome"] = "correct" if all(verdicts) else "wrong_output"
    except Exception as e:  # noqa: BLE001 - the outcome of a failing candidate is what we record
        out["outcome"] = "raised"
        out["error"] = f"{type(e).__module__}.{type(e).__name__}: {str(e)[:200]}"
        out["trace_tail"] = traceback.format_exc().splitlines()[-1][:200]
    torch.cuda.empty_cache()
    expected = {"wrong_output": "wrong_output", "compile_error": "raised", "runtime_error": "raised"}
    out["label_holds"] = out["outcome"] == ("correct" if kind.startswith("correct") else expected[kind])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--only", default="", help="substring of the attempt ids to check")
    ap.add_argument("--intents", default="", help="comma-separated intent prefixes to check (default: all)")
    args = ap.parse_args(argv)
    from grader.catalogue import load_catalogue

    cat = load_catalogue()
    rows = []
    for name in ("attempts.jsonl", "checkpoints/baseline.jsonl", "checkpoints/treatment.jsonl"):
        rows += [json.loads(line) for line in (ROOT / "demo" / name).read_text().splitlines() if line.strip()]
    wanted = tuple(p for p in args.intents.split(",") if p) or ("",)
    rows = [r for r in rows if not r["extra"]["intended"].startswith(SKIP) and args.only in r["attempt_id"]
            and r["extra"]["intended"].startswith(wanted)]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        for row in rows:
            t = time.perf_counter()
            res = check(row, cat[row["task_id"]], Path(tmp))
            res["wall_s"] = round(time.perf_counter() - t, 2)
            results.append(res)
            print(json.dumps(res), flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(json.dumps(res) + "\n")
    broken = [r["attempt_id"] for r in results if not r["label_holds"]]
    print(f"{len(results)} checked, {len(broken)} labels do not hold: {broken}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
