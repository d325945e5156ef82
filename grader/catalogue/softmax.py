"""Softmax family: row softmax in fp32 and fp16, and log-softmax."""
from grader.taskcard import InputSpec, TaskCard

# Softmax and log-softmax of whole rows held in registers: one read, one write, statistics in fp32.
# Launch shapes swept on an H200 (fp16 softmax, 8192 x 4096: 38 us against torch.softmax's 110 us).
_TRITON_ROWS = '''
import torch, triton, triton.language as tl

@triton.jit
def _softmax_rows(x_ptr, y_ptr, M, N, stride, LOG: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offs = rows[:, None] * stride + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=-float("inf")).to(tl.float32)
    # Rows past M hold only padding: zeros there keep -inf - -inf NaNs out of the arithmetic.
    x = tl.where(rows[:, None] < M, x, 0.0)
    shifted = x - tl.max(x, axis=1)[:, None]
    e = tl.exp(shifted)
    if LOG:
        y = shifted - tl.log(tl.sum(e, axis=1))[:, None]
    else:
        y = e / tl.sum(e, axis=1)[:, None]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

def _launch(x, log):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    bn = triton.next_power_of_2(n)
    if x.is_cuda:
        bm = max(1, 2048 // bn)
        warps = 4 if bm * bn <= 2048 else (8 if bn <= 4096 else 16)
    else:
        bm, warps = triton.next_power_of_2(triton.cdiv(m, 8)), 4
    _softmax_rows[(triton.cdiv(m, bm),)](x, y, m, n, x.stride(0), LOG=log, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
    return y
'''

# fp32: a row at a time, several rows a program on the GPU. On the CPU, where Triton's interpreter runs every op of
# every program, `_TRITON_ROWS`'s launch takes the rows as one block instead: a call at each CPU size took 0.10 s
# in all against the loop's 0.50 s (the CPU suite grades this task more than any other).
_TRITON_ROW_SOFTMAX = _TRITON_ROWS + '''
@triton.jit
def _softmax_row_loop(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for r in range(ROWS):
        row = pid * ROWS + r
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(y_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=cols < n_cols)

def run(x):
    if not x.is_cuda:
        return _launch(x, False)
    m, n = x.shape
    y = torch.empty_like(x)
    rows = 1
    while rows < 16 and m % (rows * 2) == 0 and m // (rows * 2) >= 8:
        rows *= 2
    _softmax_row_loop[(m // rows,)](x, y, n, x.stride(0), BLOCK=triton.next_power_of_2(n), ROWS=rows)
    return y
'''

_TRITON_SOFTMAX = _TRITON_ROWS + '''
def run(x):
    return _launch(x, False)
'''

_TRITON_LOG_SOFTMAX = _TRITON_ROWS + '''
def run(x):
    return _launch(x, True)
'''

# Log-softmax y = (x - max) - L with L = log sum exp(x - max): L carries the relative error of its
# N-term sum as an absolute error, and a dominant term makes L (and |y| at the maximum) small without
# making that error small: the other N-1 terms still pass through the accumulator, and a sequential
# one absorbs those below half an ulp of its running total (measured: 2.2x the |y| bound at N = 7000).
# So each element is judged at least at magnitude log N, the value L takes when no term dominates;
# elements with |y| above it keep the |y| bound. Softmax needs none: its sum has positive terms only,
# and its error is relative to each element.
_LOG_SUM_SCALE = "import math, torch\ndef run(x):\n    return torch.full_like(x, math.log(x.shape[-1]))\n"

_SOFTMAX_FORBIDDEN = ("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax")

CARDS = [
    TaskCard(
        task_id="softmax_rows_fp32",
        family="softmax",
        lineage="kerneltraj/softmax",
        description="Softmax over the last axis of an (M, N) float32 matrix.",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-3.0, 3.0), std=(0.5, 4.0)),),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return torch.softmax(x, dim=-1)\n",
        expert=_TRITON_ROW_SOFTMAX,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": ({"M": 8192, "N": 1024}, {"M": 4096, "N": 4096})},
        hidden_sizes={"cpu": ({"M": 48, "N": 200},), "gpu": ({"M": 12288, "N": 2000}, {"M": 2048, "N": 8192})},
        bytes_moved="2 * M * N * E",
        forbidden_ops=("aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"),
        pytorch_ops=("pointwise", "reduction"),
    ),
    TaskCard(
        task_id="softmax_rows_fp16",
        family="softmax",
        lineage="kerneltraj/softmax",
        description="Softmax over the last axis of an (M, N) float16 matrix, fp32 arithmetic inside.",
        inputs=(InputSpec("x", ("M", "N"), "float16", mean=(-3.0, 3.0), std=(0.5, 4.0)),),
        output_shape=("M", "N"),
        output_dtype="float16",
        reference="import torch\ndef run(x):\n    return torch.softmax(x, dim=-1)\n",
        expert=_TRITON_SOFTMAX,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": ({"M": 8192, "N": 4096}, {"M": 16384, "N": 2048})},
        hidden_sizes={"cpu": ({"M": 40, "N": 300},), "gpu": ({"M": 12000, "N": 3000}, {"M": 4096, "N": 5000})},
        bytes_moved="2 * M * N * E",
        forbidden_ops=_SOFTMAX_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction"),
    ),
    TaskCard(
        task_id="log_softmax_rows_fp32",
        family="softmax",
        lineage="kerneltraj/softmax",
        description="Log-softmax over the last axis of an (M, N) float32 matrix.",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-3.0, 3.0), std=(0.5, 4.0)),),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return torch.log_softmax(x, dim=-1)\n",
        expert=_TRITON_LOG_SOFTMAX,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": ({"M": 8192, "N": 2048}, {"M": 4096, "N": 4096})},
        hidden_sizes={"cpu": ({"M": 33, "N": 300},), "gpu": ({"M": 12288, "N": 2000}, {"M": 3000, "N": 7000})},
        bytes_moved="2 * M * N * E",
        forbidden_ops=_SOFTMAX_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction"),

        error_scale=_LOG_SUM_SCALE,
    ),
]
