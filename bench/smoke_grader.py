"""Quick end-to-end check of the sealed grader on this machine: a few honest and cheating
softmax candidates through both worker modes, with phase timings. Prints one table."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.contract import GradeRequest  # noqa: E402
from grader.service import GraderService  # noqa: E402

TRITON_GOOD = '''
import torch, triton, triton.language as tl
@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row*n + cols, mask=cols<n, other=-float("inf"))
    x = x - tl.max(x, 0)
    e = tl.exp(x)
    tl.store(y_ptr + row*n + cols, e/tl.sum(e,0), mask=cols<n)
def run(x):
    y = torch.empty_like(x)
    k[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''
CASES = {
    "triton_good": (TRITON_GOOD, "triton"),
    "torch_good": ("import torch\ndef run(x):\n    e = (x - x.max(-1, keepdim=True).values).exp()\n"
                   "    return e / e.sum(-1, keepdim=True)\n", "pytorch"),
    "lib_cheat": ("import torch\ndef run(x):\n    return torch.softmax(x, -1)\n", "pytorch"),
    "empty_cheat": ("import torch\ndef run(x):\n    return torch.empty_like(x)\n", "pytorch"),
    "side_stream": ("import torch\ns = None\ndef run(x):\n    global s\n    s = s or torch.cuda.Stream()\n"
                    "    y = torch.empty_like(x)\n    s.wait_stream(torch.cuda.current_stream())\n"
                    "    with torch.cuda.stream(s):\n        for _ in range(20):\n"
                    "            e = (x - x.max(-1, keepdim=True).values).exp()\n"
                    "            y.copy_(e / e.sum(-1, keepdim=True))\n    return y\n", "pytorch"),
    "peek": ("import os\ntry:\n    os.listdir('/work')\nexcept OSError:\n    pass\n"
             "import torch\ndef run(x):\n    e = (x - x.max(-1, keepdim=True).values).exp()\n"
             "    return e / e.sum(-1, keepdim=True)\n", "pytorch"),
    "crash": ("import os\ndef run(x):\n    os.abort()\n", "pytorch"),
}


def main() -> None:
    rows = []
    for mode in sys.argv[1:] or ["zygote", "fresh"]:
        t0 = time.perf_counter()
        with GraderService(mode=mode) as svc:
            boot = time.perf_counter() - t0
            reqs = [GradeRequest(attempt_id=f"{mode}:{name}", task_id="softmax_rows_fp32", source=src, language=lang,
                                 timeout_s=120) for name, (src, lang) in CASES.items()]
            for r in svc.grade(reqs):
                ph = r.phase_seconds
                rows.append((r.attempt_id, r.status.value, r.reason_code.value, f"{r.reward:.3f}",
                             f"{r.measured_speedup_geomean or 0:.3f}",
                             *(f"{ph.get(k, 0):.2f}" for k in ("startup", "compile", "correctness", "reference",
                                                               "transfer", "timing", "expert", "total")),
                             r.reason[:70]))
        rows.append((f"{mode}: service boot", f"{boot:.2f}s", svc.device_name, str(r.sandbox)[:300]))
    head = ("attempt", "status", "reason_code", "reward", "measured", "startup", "compile", "correct", "ref", "xfer",
            "timing", "expert", "total", "reason")
    print("\t".join(head))
    for row in rows:
        print("\t".join(map(str, row)))


if __name__ == "__main__":
    main()
