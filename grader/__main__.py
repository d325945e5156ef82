"""`python -m grader`: grade a batch on a bare GPU (or CPU) worker.

    python -m grader grade --in requests.jsonl --out results.jsonl [--workers 2] [--mode zygote]
    python -m grader fingerprint
    python -m grader tasks [--json]

Needs only torch, triton, nvidia-ml-py and the standard library.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m grader", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade GradeRequest JSON lines into GradeResult JSON lines")
    g.add_argument("--in", dest="inp", default="-", help="requests file (JSON lines), '-' for stdin")
    g.add_argument("--out", default="-", help="results file (JSON lines), '-' for stdout")
    g.add_argument("--mode", choices=("zygote", "fresh"), default="zygote",
                   help="zygote: fork each worker from a pre-imported process; fresh: new interpreter per attempt")
    g.add_argument("--workers", type=int, default=1, help="attempts in flight at once (timing stays exclusive)")
    g.add_argument("--device", default="auto", help="auto, cpu or cuda")
    g.add_argument("--catalogue-extra", action="append", default=[], help="JSON-lines file of extra task cards")
    g.add_argument("--profile", default=None, help="force a size profile (cpu/gpu) for every request")
    f = sub.add_parser("fingerprint", help="print this machine's hardware fingerprint")
    f.add_argument("--record", help="also write the raw NVML answers to this JSON file (for CPU replay)")
    t = sub.add_parser("tasks", help="list the catalogue (public fields only): the call signature, dtypes, "
                                    "public sizes and tolerances of every task")
    t.add_argument("--json", action="store_true", help="one JSON object per task instead of a table")
    args = ap.parse_args(argv)

    if args.cmd == "fingerprint":
        from grader import fingerprint
        from grader.service import pick_device

        if args.record:
            import pynvml

            rec = fingerprint.Recorder(pynvml)
            fp = fingerprint.collect(rec)
            with open(args.record, "w") as fh:
                json.dump(rec.dump(), fh, indent=1, sort_keys=True)
        else:
            fp = fingerprint.read_local(pick_device().startswith("cuda"))
        print(json.dumps({"fingerprint_id": fingerprint.fingerprint_id(fp), **fp}, indent=2, sort_keys=True))
        return 0
    if args.cmd == "tasks":
        from grader.catalogue import load_catalogue
        from grader.taskcard import size_key

        for card in load_catalogue().values():
            row = _task_row(card)
            if args.json:
                print(json.dumps(row))
            else:
                sizes = "; ".join(size_key(z) for z in row["public_sizes"].get("gpu", []))
                print(f"{row['task_id']}  [{row['family']}, rev {row['revision']}]  {row['signature']}"
                      f"  public gpu sizes: {sizes}  atol/rtol {row['tolerance']}")
        return 0
    return _grade(args)


def _task_row(card) -> dict:
    """What an agent may know of a task: no hidden size, no expert source."""
    pub = card.public_card()
    args = ", ".join(f"{i['name']}: {i['dtype']}[{', '.join(map(str, i['shape']))}]" for i in pub["inputs"])
    out = f"{pub['output_dtype']}[{', '.join(map(str, pub['output_shape']))}]"
    return {"task_id": pub["task_id"], "family": pub["family"], "lineage": pub["lineage"], "revision": pub["revision"],
            "signature": f"run({args}) -> {out}", "public_sizes": pub["public_sizes"],
            "tolerance": list(card.tolerance()), "description": pub["description"]}


def _grade(args) -> int:
    import dataclasses

    from grader.contract import request_from_json
    from grader.service import GraderService

    try:
        src = sys.stdin if args.inp == "-" else open(args.inp)
    except OSError as e:
        print(f"python -m grader grade: cannot read the requests file {args.inp}: {e.strerror}; give a JSON-lines "
              "file of GradeRequest objects, or '-' for standard input", file=sys.stderr)
        return 2
    requests = []
    for n, line in enumerate(src, 1):
        if line.strip():
            try:
                req = request_from_json(line)
            except (ValueError, TypeError) as e:
                print(f"{args.inp}:{n}: not a grade request: {e}", file=sys.stderr)
                return 2
            requests.append(dataclasses.replace(req, profile=args.profile) if args.profile else req)
    out = sys.stdout if args.out == "-" else open(args.out, "w")
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    with GraderService(mode=args.mode, workers=args.workers, device=args.device,
                       catalogue_extra=args.catalogue_extra) as svc:
        for i, result in enumerate(svc.grade(requests), 1):
            out.write(result.to_json() + "\n")
            out.flush()
            counts[result.status.value] = counts.get(result.status.value, 0) + 1
            print(f"[{i}/{len(requests)}] {result.attempt_id}: {result.status.value} reward={result.reward:.3f}",
                  file=sys.stderr)
    print(json.dumps({"graded": len(requests), "seconds": round(time.perf_counter() - t0, 2), "statuses": counts}),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
