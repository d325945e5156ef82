"""How long a candidate's CUDA extension takes to build, and what a precompiled torch/extension.h would save.

CUDA-L1 attempts build an extension at import (`torch.utils.cpp_extension.load_inline`): a `main.cpp` that includes
torch/extension.h and binds the functions, and a `cuda.cu` with the kernels. On the H200 their builds held a slot for
30-200 s each (docs/measurements/2026-12-04-h200-run48/ to run50/, `compile` phase), 12 of them at once with the
rest of the grading. This script compiles one extension of that shape, written here (no corpus code), with the
flags torch's own build uses, one compiler at a time:

- `main.cpp`, as torch compiles it;
- `main.cpp` again with a precompiled torch/extension.h (what `load_inline(use_pch=True)` would use), and the
  precompiled header's own build, which a grader would do once per torch install;
- `cuda.cu` with nvcc for sm_90 (the H200), which no precompiled header of the host compiler's serves.

It prints a table of median seconds per step and the ratio with and without the header. It needs g++ and nvcc
(CUDA_HOME or PATH) and torch's headers; a CPU wheel has them.

    python bench/ext_build_time.py --repeats 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

MAIN_CPP = """#include <torch/extension.h>

torch::Tensor scale_rows(torch::Tensor x, torch::Tensor w);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale_rows", torch::wrap_pybind_function(scale_rows), "scale_rows");
}
"""

CUDA_CU = """#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void scale_rows_kernel(const float* x, const float* w, float* y, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] = x[i] * w[i / cols];
}

torch::Tensor scale_rows(torch::Tensor x, torch::Tensor w) {
  auto y = torch::empty_like(x);
  int n = x.numel(), threads = 256;
  scale_rows_kernel<<<(n + threads - 1) / threads, threads>>>(x.data_ptr<float>(), w.data_ptr<float>(),
                                                              y.data_ptr<float>(), x.size(0), x.size(1));
  return y;
}
"""


def _flags() -> tuple[list[str], list[str]]:
    """The host compiler's and nvcc's flags, as torch's extension build passes them."""
    from torch.utils.cpp_extension import include_paths

    common = ["-DTORCH_EXTENSION_NAME=scale_rows_ext", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for path in include_paths() + [sysconfig.get_paths()["include"]]:
        common += ["-isystem", path]
    import torch

    abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
    host = common + [abi, "-fPIC", "-std=c++17"]
    nvcc = common + [abi, "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                     "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
                     "--expt-relaxed-constexpr", "-gencode=arch=compute_90,code=sm_90",
                     "--compiler-options", "-fPIC", "-std=c++17"]
    return host, nvcc


def _timed(cmd: list[str], cwd: str) -> float:
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({done.returncode}): {(done.stderr or done.stdout)[-800:]}")
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="builds of each step; the table shows their median")
    args = ap.parse_args(argv)
    cxx = shutil.which("g++") or shutil.which("c++")
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                    if os.environ.get("CUDA_HOME") else None)
    if cxx is None:
        print("no host C++ compiler (g++) on PATH: nothing to measure", file=sys.stderr)
        return 2
    host, nvcc_flags = _flags()
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="kerneltraj-ext-build-") as d:
        with open(os.path.join(d, "main.cpp"), "w") as f:
            f.write(MAIN_CPP)
        with open(os.path.join(d, "cuda.cu"), "w") as f:
            f.write(CUDA_CU)
        pch_dir = os.path.join(d, "pch", "torch")
        os.makedirs(pch_dir)
        header = os.path.join(pch_dir, "extension.h")
        with open(header, "w") as f:
            f.write("#include <torch/extension.h>\n")
        for _ in range(args.repeats):
            rows.setdefault("main.cpp", []).append(_timed([cxx, *host, "-c", "main.cpp", "-o", "main.o"], d))
            rows.setdefault("precompiled torch/extension.h (once per install)", []).append(
                _timed([cxx, *host, "-x", "c++-header", header, "-o", header + ".gch"], d))
            # -include finds extension.h.gch beside the header it names, built with the same flags
            rows.setdefault("main.cpp with the precompiled header", []).append(
                _timed([cxx, *host, "-include", header, "-c", "main.cpp", "-o", "main_pch.o"], d))
            if nvcc:
                rows.setdefault("cuda.cu (nvcc, sm_90)", []).append(
                    _timed([nvcc, *nvcc_flags, "-c", "cuda.cu", "-o", "cuda.o"], d))
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"{'step':<52}{'median s':>10}{'min s':>8}{'max s':>8}")
    for k, v in rows.items():
        print(f"{k:<52}{med[k]:>10.2f}{min(v):>8.2f}{max(v):>8.2f}")
    plain, pch = med["main.cpp"], med["main.cpp with the precompiled header"]
    print(f"main.cpp with the header / without: {pch / plain:.2f}x ({plain - pch:.1f} s saved a build)")
    if "cuda.cu (nvcc, sm_90)" in med:
        cu = med["cuda.cu (nvcc, sm_90)"]
        print(f"the whole build, objects one after the other: {plain + cu:.1f} s -> {pch + cu:.1f} s "
              f"({(pch + cu) / (plain + cu):.2f}x); ninja builds the two objects side by side when cores are free")
    else:
        print("no nvcc: the .cu step was not measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
