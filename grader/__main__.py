"""`python -m grader`: grade a batch on a bare GPU (or CPU) worker.

    python -m grader grade --in requests.jsonl --out results.jsonl [--workers 2] [--mode zygote]
    python -m grader fingerprint
    python -m grader tasks [--json]

Needs only torch, triton, nvidia-ml-py and the standard library.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time

PROG = "python -m grader"


def _positive_int(text: str) -> int:
    """argparse type: an integer of at least 1 (0 workers would wait forever)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} is less than 1")
    return n


def _device(text: str) -> str:
    """argparse type: auto, cpu, cuda or cuda:N."""
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d{1,3}", text):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not auto, cpu, cuda or cuda:N")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line that says where the help is (not the whole usage)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}; see `{self.prog} -h`\n")


def _card_error(e: Exception) -> str:
    return f"missing field {e}" if isinstance(e, KeyError) else str(e)


def _fail(message: str) -> int:
    """A usage error: one line on stderr, exit status 2."""
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade GradeRequest JSON lines into GradeResult JSON lines")
    g.add_argument("--in", dest="inp", default="-", help="requests file (JSON lines), '-' for stdin")
    g.add_argument("--out", default="-", help="results file (JSON lines), '-' for stdout")
    g.add_argument("--mode", choices=("zygote", "fresh"), default="zygote",
                   help="zygote: fork each worker from a pre-imported process; fresh: new interpreter per attempt")
    g.add_argument("--workers", type=_positive_int, default=1,
                   help="attempts in flight at once, at least 1 (timing stays exclusive)")
    g.add_argument("--device", type=_device, default="auto", help="auto, cpu, cuda or cuda:N (default auto)")
    g.add_argument("--catalogue-extra", action="append", default=[], metavar="TASKS_JSONL",
                   help="JSON-lines file of extra task cards (an import's tasks.jsonl); repeatable")
    g.add_argument("--compile-cache", default=None, metavar="DIR",
                   help="folder of extension builds shared across attempts of one program, or 'off' "
                        "(default: a per-uid folder under the temp dir)")
    g.add_argument("--profile", choices=("cpu", "gpu"), default=None,
                   help="force a size profile for every request (default: each request's own)")
    f = sub.add_parser("fingerprint", help="print this machine's hardware fingerprint")
    f.add_argument("--record", help="also write the raw NVML answers to this JSON file (for CPU replay)")
    t = sub.add_parser("tasks", help="list the catalogue (public fields only): the call signature, dtypes, "
                                    "public sizes and tolerances of every task")
    t.add_argument("--json", action="store_true", help="one JSON object per task instead of a table")
    t.add_argument("--catalogue-extra", action="append", default=[], metavar="TASKS_JSONL",
                   help="also list the task cards of this JSON-lines file (an import's tasks.jsonl); repeatable")
    args = ap.parse_args(argv)

    if args.cmd == "fingerprint":
        from grader import fingerprint
        from grader.service import pick_device

        if args.record:
            import pynvml  # a dependency of the grader, always installed; the driver may be missing

            try:
                rec = fingerprint.Recorder(pynvml)
                fp = fingerprint.collect(rec)
            except pynvml.NVMLError as e:
                return _fail(f"fingerprint --record: NVML cannot be read here ({e}); --record needs an NVIDIA "
                             "driver, leave it out to print this machine's fingerprint")
            try:
                with open(args.record, "w") as fh:
                    json.dump(rec.dump(), fh, indent=1, sort_keys=True)
            except OSError as e:
                return _fail(f"fingerprint --record: cannot write {args.record}: {e.strerror}; give a writable path")
        else:
            fp = fingerprint.read_local(pick_device().startswith("cuda"))
        print(json.dumps({"fingerprint_id": fingerprint.fingerprint_id(fp), **fp}, indent=2, sort_keys=True))
        return 0
    if args.cmd == "tasks":
        from grader.catalogue import load_catalogue
        from grader.taskcard import size_key

        try:
            cards = load_catalogue(args.catalogue_extra)
        except (OSError, ValueError, TypeError, KeyError) as e:
            return _fail(f"tasks: a --catalogue-extra file cannot be read as task cards ({_card_error(e)}); give the tasks.jsonl "
                         "an import wrote")
        for card in cards.values():
            row = _task_row(card)
            if args.json:
                print(json.dumps(row))
                continue
            sizes = "  ".join(f"public {profile} sizes: {'; '.join(size_key(z) for z in zs)}"
                              for profile, zs in sorted(row["public_sizes"].items()))
            print(f"{row['task_id']}  [{row['family']}, rev {row['revision']}]  {row['signature']}"
                  f"  {sizes}  atol/rtol {row['tolerance']}")
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

    from grader.catalogue import load_catalogue
    from grader.contract import request_from_json
    from grader.service import GraderService

    try:
        src = sys.stdin if args.inp == "-" else open(args.inp)
    except OSError as e:
        return _fail(f"grade: cannot read the requests file {args.inp}: {e.strerror}; give a JSON-lines file of "
                     "GradeRequest objects, or '-' for standard input")
    try:
        catalogue = load_catalogue(args.catalogue_extra)
    except OSError as e:
        return _fail(f"grade: cannot read the task-card file {e.filename}: {e.strerror}; give the tasks.jsonl an "
                     "import wrote, or leave out --catalogue-extra")
    except (ValueError, TypeError, KeyError) as e:
        return _fail(f"grade: a --catalogue-extra file is not a JSON-lines file of task cards ({_card_error(e)}); give the "
                     "tasks.jsonl an import wrote")
    requests = []
    for n, line in enumerate(src, 1):
        if line.strip():
            try:
                req = request_from_json(line)
            except (ValueError, TypeError) as e:
                return _fail(f"grade: {args.inp}:{n}: not a grade request: {e}; fix or remove that line")
            if req.task_id not in catalogue:
                # The user named a task the grader does not have: a usage error, not a failed grade.
                return _fail(f"grade: {args.inp}:{n}: task {req.task_id!r} (attempt {req.attempt_id!r}) is not in "
                             "the catalogue; `python -m grader tasks` lists the tasks, --catalogue-extra FILE adds "
                             "imported ones")
            requests.append(dataclasses.replace(req, profile=args.profile) if args.profile else req)
    try:
        out = sys.stdout if args.out == "-" else open(args.out, "w")
    except OSError as e:
        return _fail(f"grade: cannot write the results file {args.out}: {e.strerror}; give a writable path, or '-' "
                     "for standard output")
    t0 = time.perf_counter()
    counts: dict[str, int] = {}
    with GraderService(mode=args.mode, workers=args.workers, device=args.device,
                       catalogue_extra=args.catalogue_extra, compile_cache=args.compile_cache) as svc:
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
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m grader tasks | head`: the reader left, nothing is wrong
        sys.stderr.close()
        sys.exit(0)
