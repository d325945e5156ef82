"""A fixed sample of real CUDA-L1 attempts (H100 file) with their task cards and claims.

    python bench/cuda_l1_sample.py --n 24 --out .gpu_carry/cuda_l1   # here, where ../shared/data is
    python bench/cuda_l1_sample.py --n 40 --raw-subset DIR          # DIR/h100.jsonl, for `kerneltraj import`

The GPU machine has no ../shared/data and no Dagster, so the sample is prepared here (importer,
output probes) and carried; `sample_requests` reads the prepared files there.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PREPARED = ROOT / ".gpu_carry" / "cuda_l1"
SHARED = ROOT.parent / "shared" / "data" / "cuda-l1" / "h100.jsonl"


def _spread(items: list, want: int) -> list:
    """`want` items spread evenly over a sorted list (deterministic)."""
    return items[::max(1, len(items) // max(want, 1))][:want]


STRATA = [(level, language) for level in (1, 2, 3) for language in ("cuda", "pytorch")]
"""As many attempts of each level, half CUDA through load_inline."""


def write_raw_subset(n: int, out: Path) -> Path:
    """The corpus's own lines for a sample of n tasks with a candidate, chosen like `prepare`'s, as
    out/h100.jsonl (the file name carries the GPU of the claims): what `kerneltraj import cuda-l1` takes, without
    importing (and probing) all 250 tasks."""
    import json

    from pipelines.importers.kernelbench import language_of

    rows = [(json.loads(ln), ln) for ln in SHARED.read_text().splitlines() if ln.strip()]
    rows = sorted(((d, ln) for d, ln in rows if (d.get("custom_code") or "").strip()),
                  key=lambda r: (r[0]["level_id"], r[0]["task_id"]))
    chosen = []
    for i, (level, language) in enumerate(STRATA):
        pool = [ln for d, ln in rows if d["level_id"] == level and language_of(d["custom_code"]) == language]
        chosen += _spread(pool, n // len(STRATA) + (i < n % len(STRATA)))
    out.mkdir(parents=True, exist_ok=True)
    (out / SHARED.name).write_text("\n".join(chosen) + "\n")
    return out / SHARED.name


def prepare(n: int, out: Path) -> None:
    from pipelines.importers import cuda_l1, write_cards

    batch = cuda_l1.import_path([SHARED])
    cards = {c.task_id: c for c in batch.cards if c.public_sizes.get("gpu")}
    chosen = []
    for i, (level, language) in enumerate(STRATA):
        pool = sorted((a for a in batch.attempts if a.task_id in cards and a.language == language
                       and a.task_id.startswith(f"kernelbench_L{level}_")), key=lambda a: a.task_id)
        chosen += _spread(pool, n // len(STRATA) + (i < n % len(STRATA)))
    out.mkdir(parents=True, exist_ok=True)
    write_cards([cards[a.task_id] for a in {a.task_id: a for a in chosen}.values()], out / "cards.jsonl")
    with open(out / "requests.jsonl", "w") as f:
        for a in chosen:
            f.write(json.dumps({"attempt_id": a.attempt_id, "task_id": a.task_id, "source": a.source,
                                "language": a.language, "entry_point": a.entry_point,
                                "claimed_speedup": a.claimed_speedup}) + "\n")
    n_own = prepare_own_inputs(out)
    n_cuda = prepare_cuda_own(out, {a.task_id for a in chosen})
    print(f"{len(chosen)} attempts on {len({a.task_id for a in chosen})} tasks, {n_own} attempts at tasks that "
          f"make their own inputs and {n_cuda} CUDA cases of our own -> {out}")


OWN_INPUTS = ROOT / "tests" / "fixtures" / "own_inputs"
CUDA_OWN = ROOT / "tests" / "fixtures" / "cuda_own"
CASE_GROUPS = {"own_inputs": "own_inputs_requests.jsonl", "cuda_own": "cuda_own_requests.jsonl"}
"""Groups of our own cases carried beside the sample, each attempt with the verdict it must get."""


def _write_cases(path: Path, rows: list[tuple[str, str, str, str, str]]) -> int:
    """(attempt id, task id, source, language, expected status/reason) as request lines."""
    with open(path, "w") as f:
        for aid, task_id, source, language, expect in rows:
            f.write(json.dumps({"attempt_id": aid, "task_id": task_id, "source": source, "language": language,
                                "entry_point": "ModelNew", "expect": expect}) + "\n")
    return len(rows)


def prepare_cuda_own(out: Path, sampled_tasks: set[str]) -> int:
    """Our own CUDA candidates for tasks of the sample (tests/fixtures/cuda_own): an honest extension and a
    CUDA-graph replay of library kernels, to hold the own-kernel rule to both sides on the GPU, and an extension that
    fails to build with a library fallback (CUDA-L1's commonest shape), a build failure however it is found."""
    cases = json.loads((CUDA_OWN / "cases.json").read_text())
    rows = [(f"cuda_own:{name}", task, (CUDA_OWN / src).read_text(), "cuda", f"{status}/{code}")
            for name, (task, src, status, code) in cases["attempts"].items() if task in sampled_tasks]
    return _write_cases(out / CASE_GROUPS["cuda_own"], rows)


def prepare_own_inputs(out: Path) -> int:
    """Cards and requests of the KernelBench-style tasks whose inputs only their own get_inputs() makes
    (tests/fixtures/own_inputs), beside the sample: each attempt carries the verdict it must get."""
    from pipelines.importers import write_cards
    from pipelines.importers.kernelbench import build_cards, kernelbench_task_id

    cases = json.loads((OWN_INPUTS / "cases.json").read_text())
    keys = {k: tuple(map(int, k.split(":"))) for k in cases["tasks"]}
    cards = build_cards({keys[k]: (OWN_INPUTS / f).read_text() for k, f in cases["tasks"].items()})
    refused = {k: c for k, c in cards.items() if isinstance(c, Exception)}
    if refused:
        raise SystemExit(f"the importer refused own-input tasks: {refused}")
    write_cards(list(cards.values()), out / "own_inputs_cards.jsonl")
    return _write_cases(out / CASE_GROUPS["own_inputs"], [
        (f"own_inputs:{name}", kernelbench_task_id(*keys[key]), (OWN_INPUTS / src).read_text(), "pytorch",
         f"{status}/{code}") for name, (key, src, status, code) in cases["attempts"].items()])


def sample_requests(n: int):
    """(requests, card files, metas) of the first n prepared attempts; a meta holds the attempt's group
    (`cuda_l1`), level and the speedup its authors claim. Our own cases (`CASE_GROUPS`, each with the verdict
    it must get) come with them when prepared."""
    from grader.contract import GradeRequest

    path = PREPARED if (PREPARED / "requests.jsonl").exists() else None
    if path is None:
        raise FileNotFoundError("no prepared CUDA-L1 sample: run `python bench/cuda_l1_sample.py` where "
                                "../shared/data exists and carry .gpu_carry")
    reqs, metas = [], []
    for line in (path / "requests.jsonl").read_text().splitlines()[:n]:
        d = json.loads(line)
        reqs.append(GradeRequest(attempt_id=d["attempt_id"], task_id=d["task_id"], source=d["source"],
                                 language=d["language"], entry_point=d["entry_point"], timeout_s=300, seed=11))
        metas.append({"group": "cuda_l1", "level": int(d["task_id"].split("_L")[1].split("_")[0]),
                      "claimed_speedup": d.get("claimed_speedup"), "language": d["language"]})
    for group, name in CASE_GROUPS.items():
        extra = path / name
        for line in (extra.read_text().splitlines() if extra.exists() else []):
            d = json.loads(line)
            reqs.append(GradeRequest(attempt_id=d["attempt_id"], task_id=d["task_id"], source=d["source"],
                                     language=d["language"], entry_point=d["entry_point"], timeout_s=300, seed=11))
            metas.append({"group": group, "expect": d["expect"], "language": d["language"]})
    own_cards = path / "own_inputs_cards.jsonl"
    return reqs, [str(path / "cards.jsonl")] + ([str(own_cards)] if own_cards.exists() else []), metas


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--out", type=Path, default=PREPARED)
    ap.add_argument("--raw-subset", type=Path, metavar="DIR", help="only write the corpus lines of the sample to "
                    "DIR/h100.jsonl (for `kerneltraj import cuda-l1`)")
    a = ap.parse_args()
    if a.raw_subset:
        print(write_raw_subset(a.n, a.raw_subset))
    else:
        prepare(a.n, a.out)
