"""Activation family: exact GELU, SiLU-gated multiply, bias + leaky ReLU (elementwise, memory-bound)."""
from grader.taskcard import InputSpec, TaskCard

# Every expert picks its launch from the device: on CUDA a tile that keeps the memory system busy;
# on CPU (the Triton interpreter, whose cost is per program instance) a few large programs.

_GELU = '''
import torch, triton, triton.language as tl

@triton.jit
def _gelu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def run(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    if x.is_cuda:
        block, warps = 2048, 8
    else:
        block, warps = max(1024, triton.next_power_of_2(triton.cdiv(n, 4))), 4
    _gelu[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, num_warps=warps)
    return y
'''

_SILU_MUL = '''
import torch, triton, triton.language as tl

@triton.jit
def _silu_mul(g_ptr, u_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = g / (1.0 + tl.exp(-g)) * u
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def run(gate, up):
    gate, up = gate.contiguous(), up.contiguous()
    y = torch.empty_like(gate)
    n = gate.numel()
    if gate.is_cuda:
        block, warps = 4096, 8
    else:
        block, warps = max(1024, triton.next_power_of_2(triton.cdiv(n, 4))), 4
    _silu_mul[(triton.cdiv(n, block),)](gate, up, y, n, BLOCK=block, num_warps=warps)
    return y
'''

_BIAS_LEAKY_RELU = '''
import torch, triton, triton.language as tl

@triton.jit
def _bias_leaky_relu(x_ptr, b_ptr, y_ptr, M, N, stride, slope,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offs = rows[:, None] * stride + cols[None, :]
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    v = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32) + b[None, :]
    y = tl.where(v > 0, v, v * slope)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def run(x, b):
    x, b = x.contiguous(), b.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    if x.is_cuda:
        bn = min(1024, triton.next_power_of_2(n))
        bm, warps = max(1, 4096 // bn), 8
    else:
        bn = triton.next_power_of_2(n)
        bm, warps = triton.next_power_of_2(triton.cdiv(m, 4)), 4
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _bias_leaky_relu[grid](x, b, y, m, n, x.stride(0), 0.1, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
    return y
'''

_ELEMENTWISE_CPU = ({"M": 64, "N": 256},)
_ELEMENTWISE_CPU_HIDDEN = ({"M": 37, "N": 200},)

CARDS = [
    TaskCard(
        task_id="gelu_fp32",
        family="activation",
        lineage="kerneltraj/activation",
        description="Exact (erf) GELU of an (M, N) float32 matrix: 0.5 * x * (1 + erf(x / sqrt(2))).",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 2.5)),),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return torch.nn.functional.gelu(x)\n",
        expert=_GELU,
        expert_kind="triton",
        public_sizes={"cpu": _ELEMENTWISE_CPU, "gpu": ({"M": 4096, "N": 4096}, {"M": 8192, "N": 2048})},
        hidden_sizes={"cpu": _ELEMENTWISE_CPU_HIDDEN, "gpu": ({"M": 6000, "N": 3000}, {"M": 3333, "N": 5120})},
        bytes_moved="2 * M * N * E",
        forbidden_ops=("aten::gelu",),
        pytorch_ops=("pointwise",),
    ),
    TaskCard(
        task_id="silu_mul_fp16",
        family="activation",
        lineage="kerneltraj/activation",
        description="SwiGLU gate: silu(gate) * up for two (M, N) float16 matrices, fp32 arithmetic inside.",
        inputs=(InputSpec("gate", ("M", "N"), "float16", mean=(-2.0, 2.0), std=(0.5, 2.5)),
                InputSpec("up", ("M", "N"), "float16", mean=(-1.5, 1.5), std=(0.5, 2.0))),
        output_shape=("M", "N"),
        output_dtype="float16",
        reference="import torch\ndef run(gate, up):\n    return torch.nn.functional.silu(gate) * up\n",
        expert=_SILU_MUL,
        expert_kind="triton",
        public_sizes={"cpu": _ELEMENTWISE_CPU, "gpu": ({"M": 8192, "N": 4096},)},
        hidden_sizes={"cpu": _ELEMENTWISE_CPU_HIDDEN, "gpu": ({"M": 5000, "N": 11008}, {"M": 16384, "N": 1000})},
        bytes_moved="3 * M * N * E",
        forbidden_ops=("aten::silu",),
        pytorch_ops=("pointwise",),
    ),
    TaskCard(
        task_id="bias_leaky_relu_fp32",
        family="activation",
        lineage="kerneltraj/activation",
        description="leaky_relu(x + b, negative_slope=0.1) for x (M, N) float32 and a per-column bias b (N,).",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 2.5)),
                InputSpec("b", ("N",), "float32", mean=(-1.5, 1.5), std=(0.5, 2.0))),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference=("import torch\ndef run(x, b):\n"
                   "    return torch.nn.functional.leaky_relu(x + b, negative_slope=0.1)\n"),
        expert=_BIAS_LEAKY_RELU,
        expert_kind="triton",
        public_sizes={"cpu": _ELEMENTWISE_CPU, "gpu": ({"M": 4096, "N": 4096}, {"M": 16384, "N": 1024})},
        hidden_sizes={"cpu": _ELEMENTWISE_CPU_HIDDEN, "gpu": ({"M": 6000, "N": 3000}, {"M": 2500, "N": 7777})},
        bytes_moved="(2 * M * N + N) * E",
        forbidden_ops=("aten::leaky_relu",),
        pytorch_ops=("pointwise",),
    ),
]
