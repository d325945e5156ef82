"""Normalisation family: LayerNorm and RMSNorm over the last axis."""
from grader.taskcard import InputSpec, TaskCard

# Whole rows live in registers (N <= 8192 on the GPU sizes): one read of x, one write of y, and the
# statistics in fp32 whatever the storage dtype.
_LAYERNORM = '''
import torch, triton, triton.language as tl

@triton.jit
def _layernorm(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    mask = (rows[:, None] < M) & col_ok[None, :]
    offs = rows[:, None] * stride + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def run(x, w, b):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    bn = triton.next_power_of_2(n)
    if x.is_cuda:
        # Measured on an H200: two 4096-wide rows per program beat one (83 vs 113 us at 10000 x 3000).
        bm = 2 if bn == 4096 else max(1, 2048 // bn)
        warps = 4 if bm * bn <= 2048 else (8 if bn <= 4096 else 16)
    else:
        bm, warps = triton.next_power_of_2(triton.cdiv(m, 8)), 4
    _layernorm[(triton.cdiv(m, bm),)](x, w, b, y, m, n, x.stride(0), 1e-5, BLOCK_M=bm, BLOCK_N=bn,
                                      num_warps=warps)
    return y
'''

_RMSNORM = '''
import torch, triton, triton.language as tl

@triton.jit
def _rmsnorm(x_ptr, w_ptr, y_ptr, M, N, stride, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    mask = (rows[:, None] < M) & col_ok[None, :]
    offs = rows[:, None] * stride + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (x * rstd[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)

def run(x, w):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    bn = triton.next_power_of_2(n)
    if x.is_cuda:
        bm = max(1, 2048 // bn)
        warps = 4 if bm * bn <= 2048 else (8 if bn <= 4096 else 16)
    else:
        bm, warps = triton.next_power_of_2(triton.cdiv(m, 8)), 4
    _rmsnorm[(triton.cdiv(m, bm),)](x, w, y, m, n, x.stride(0), 1e-6, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
    return y
'''

_LN_REF = '''import torch
def run(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)
'''

_RMS_REF = '''import torch
def run(x, w):
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps=1e-6)
'''

# LayerNorm's output y = (x - mean) * rstd * w + b is near 0 where the two terms cancel, so |y|
# understates the rounding it carries: the mean's error (a row sum's, divided by N) is multiplied by
# rstd * |w| into every element, and is largest relative to the spread when the drawn mean is large
# against it (|mean| * rstd up to 4), and the variance's relative error scales |(x - mean) * rstd * w|.
# Each element is judged against the magnitudes that enter it: sequential fp32 statistics reached
# 2.4x the |y| bound at N = 5120 but stay below 0.05 of this one. RMSNorm needs none: it has no
# additive term, so every rounding is relative to the element itself.
_LN_SCALE = '''import torch
def run(x, w, b):
    mean = x.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(x.var(dim=-1, unbiased=False, keepdim=True) + 1e-5)
    return w.abs() * rstd * ((x - mean).abs() + mean.abs()) + b.abs()
'''

# Rows carry a drawn mean of up to +-2 against a spread of 0.5-2, so a kernel that skips the mean
# subtraction fails; weights around 1 and biases around 0 are drawn, never fixed, so neither can be
# dropped unnoticed.
_W = dict(mean=(0.5, 1.5), std=(0.1, 0.5))
_B = dict(mean=(-1.0, 1.0), std=(0.1, 0.5))
_GPU = ({"M": 8192, "N": 4096}, {"M": 32768, "N": 1024})
_GPU_HIDDEN = ({"M": 10000, "N": 3000}, {"M": 3000, "N": 5120}, {"M": 2000, "N": 8000})

CARDS = [
    TaskCard(
        task_id="layernorm_fp32",
        family="norm",
        lineage="kerneltraj/norm",
        description="LayerNorm over the last axis of (M, N) float32 with weight and bias (N,), eps=1e-5.",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 2.0)),
                InputSpec("w", ("N",), "float32", **_W),
                InputSpec("b", ("N",), "float32", **_B)),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference=_LN_REF,
        expert=_LAYERNORM,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": _GPU},
        hidden_sizes={"cpu": ({"M": 45, "N": 320},), "gpu": _GPU_HIDDEN},
        bytes_moved="(2 * M * N + 2 * N) * E",
        forbidden_ops=("aten::layer_norm", "aten::native_layer_norm"),
        pytorch_ops=("pointwise", "reduction"),
        error_scale=_LN_SCALE,
    ),
    TaskCard(
        task_id="rmsnorm_fp32",
        family="norm",
        lineage="kerneltraj/norm",
        description="RMSNorm over the last axis of (M, N) float32 with weight (N,), eps=1e-6.",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 2.0)),
                InputSpec("w", ("N",), "float32", **_W)),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference=_RMS_REF,
        expert=_RMSNORM,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": _GPU},
        hidden_sizes={"cpu": ({"M": 45, "N": 320},), "gpu": _GPU_HIDDEN},
        bytes_moved="(2 * M * N + N) * E",
        forbidden_ops=("aten::rms_norm", "aten::_fused_rms_norm"),
        pytorch_ops=("pointwise", "reduction"),
    ),
    TaskCard(
        task_id="rmsnorm_fp16",
        family="norm",
        lineage="kerneltraj/norm",
        description="RMSNorm over the last axis of (M, N) float16 with weight (N,), eps=1e-6, fp32 accumulation.",
        inputs=(InputSpec("x", ("M", "N"), "float16", mean=(-2.0, 2.0), std=(0.5, 2.0)),
                InputSpec("w", ("N",), "float16", **_W)),
        output_shape=("M", "N"),
        output_dtype="float16",
        reference=_RMS_REF,
        expert=_RMSNORM,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": ({"M": 16384, "N": 4096}, {"M": 4096, "N": 8192})},
        hidden_sizes={"cpu": ({"M": 45, "N": 320},), "gpu": ({"M": 10000, "N": 5120}, {"M": 20000, "N": 2000})},
        bytes_moved="(2 * M * N + N) * E",
        forbidden_ops=("aten::rms_norm", "aten::_fused_rms_norm"),
        pytorch_ops=("pointwise", "reduction"),
    ),
]
