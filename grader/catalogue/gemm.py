"""GEMM family: plain matrix products in fp32 and fp16, and a fused linear + bias + ReLU in fp16.

The experts are cuBLAS through PyTorch: a Triton GEMM would be a weaker yardstick than the
production library on every GPU this grades on. GPU sizes keep fp16 rows 16-byte aligned (K and N
multiples of 8): cuBLAS falls back to slow kernels otherwise, which would make a weak yardstick.
"""
from grader.taskcard import InputSpec, TaskCard

# Full fp32 (PyTorch's default leaves TF32 off for matmul): the fp32 card grades fp32 arithmetic.
_MATMUL = '''
import torch

def run(a, b):
    return torch.matmul(a, b)
'''

# cuBLASLt fuses the bias and the ReLU into the GEMM epilogue; the CPU path computes the same.
_LINEAR_BIAS_RELU = '''
import torch

def run(x, w, b):
    return torch._addmm_activation(b, x, w.t(), use_gelu=False)
'''

_MATMUL_REF = "import torch\ndef run(a, b):\n    return a @ b\n"
_LINEAR_REF = "import torch\ndef run(x, w, b):\n    return torch.relu(x @ w.T + b)\n"

_GEMM_FORBIDDEN = ("aten::matmul", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::_addmm_activation")

# fp32 with K up to 4096: an honest fp32-accumulating GEMM rounds its running sums, so entries near
# zero (drawn means of a and b close to 0) carry absolute errors the default bound cannot hold:
# measured on an H200, cuBLAS fp32 at 4096^3 with std 1.5 reaches 53x the default bound. Each entry
# is judged instead against the 2-norm of its K products, sqrt(sum_k (a_ik b_kj)^2): the partial sums
# of any K order are sums of random subsets of the products, so honest fp32 rounding stays near
# 2^-24 * sqrt(K) * that norm (sequential, split-K, pairwise and BLAS orders: at most 0.07 of
# rtol * norm at K = 4000), while TF32 or fp16 inputs alone miss by about 2^-12 * norm, above it
# wherever the entry is not dominated by the means. This replaces the former atol of 4e-3, a fixed
# stand-in for the same magnitude that was loose where the norm is small (CPU sizes, narrow draws);
# sum_k |a_ik b_kj| would be sqrt(K) times looser and let TF32 through on cancelling draws.
_FP32_GEMM_SCALE = "import torch\ndef run(a, b):\n    return ((a * a) @ (b * b)).sqrt()\n"
# fp16 output: cuBLAS may add split-K partial sums in fp16 (PyTorch allows reduced-precision
# reductions by default), which costs entries near zero up to about 2^-11 * |partial sum|;
# measured worst error on an H200 at these sizes: 5% of this bound.
_FP16_GEMM_TOL = {"float16": (2e-2, 1e-2)}

CARDS = [
    TaskCard(
        task_id="matmul_fp32",
        family="gemm",
        lineage="kerneltraj/gemm",
        description="Matrix product a @ b of a (M, K) and b (K, N), float32 in and out, fp32 arithmetic.",
        inputs=(InputSpec("a", ("M", "K"), "float32", mean=(-1.0, 1.0), std=(0.5, 1.5)),
                InputSpec("b", ("K", "N"), "float32", mean=(-1.0, 1.0), std=(0.5, 1.5))),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference=_MATMUL_REF,
        expert=_MATMUL,
        expert_kind="library",
        public_sizes={"cpu": ({"M": 64, "N": 64, "K": 128},), "gpu": ({"M": 4096, "N": 4096, "K": 4096},)},
        hidden_sizes={"cpu": ({"M": 48, "N": 40, "K": 100},),
                      "gpu": ({"M": 3000, "N": 2500, "K": 4000}, {"M": 2048, "N": 6144, "K": 1000})},
        bytes_moved="(M * K + K * N + M * N) * E",
        forbidden_ops=_GEMM_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction", "indexing"),
        error_scale=_FP32_GEMM_SCALE,
    ),
    TaskCard(
        task_id="matmul_fp16",
        family="gemm",
        lineage="kerneltraj/gemm",
        description="Matrix product a @ b of a (M, K) and b (K, N), float16 in and out, fp32 accumulation.",
        inputs=(InputSpec("a", ("M", "K"), "float16", mean=(-1.0, 1.0), std=(0.5, 1.5)),
                InputSpec("b", ("K", "N"), "float16", mean=(-1.0, 1.0), std=(0.5, 1.5))),
        output_shape=("M", "N"),
        output_dtype="float16",
        reference=_MATMUL_REF,
        expert=_MATMUL,
        expert_kind="library",
        public_sizes={"cpu": ({"M": 64, "N": 64, "K": 128},),
                      "gpu": ({"M": 4096, "N": 4096, "K": 4096}, {"M": 8192, "N": 8192, "K": 2048})},
        hidden_sizes={"cpu": ({"M": 48, "N": 40, "K": 100},),
                      "gpu": ({"M": 3000, "N": 5000, "K": 2560}, {"M": 8192, "N": 1024, "K": 4000})},
        bytes_moved="(M * K + K * N + M * N) * E",
        forbidden_ops=_GEMM_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction", "indexing"),
        tolerances=_FP16_GEMM_TOL,
    ),
    TaskCard(
        task_id="linear_bias_relu_fp16",
        family="gemm",
        lineage="kerneltraj/gemm",
        description="relu(x @ w.T + b) for x (M, K), w (N, K), b (N,), float16, fp32 accumulation.",
        # Weights scaled like a real layer's and with a small mean: a weight mean m adds about
        # K * m * mean(x) to every output, and a large one would push all outputs to one side of the
        # ReLU (a kernel that forgets the ReLU, or returns zeros, would then pass).
        inputs=(InputSpec("x", ("M", "K"), "float16", mean=(-0.5, 0.5), std=(0.5, 1.5)),
                InputSpec("w", ("N", "K"), "float16", mean=(-0.005, 0.005), std=(0.02, 0.06)),
                InputSpec("b", ("N",), "float16", mean=(-1.0, 1.0), std=(0.5, 2.0))),
        output_shape=("M", "N"),
        output_dtype="float16",
        reference=_LINEAR_REF,
        expert=_LINEAR_BIAS_RELU,
        expert_kind="library",
        public_sizes={"cpu": ({"M": 64, "N": 64, "K": 128},), "gpu": ({"M": 4096, "N": 4096, "K": 4096},)},
        hidden_sizes={"cpu": ({"M": 48, "N": 40, "K": 100},),
                      "gpu": ({"M": 3000, "N": 11008, "K": 4096}, {"M": 8192, "N": 2000, "K": 1024})},
        bytes_moved="(M * K + N * K + N + M * N) * E",
        forbidden_ops=_GEMM_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction", "indexing"),
        tolerances=_FP16_GEMM_TOL,
    ),
]
