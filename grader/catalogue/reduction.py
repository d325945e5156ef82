"""Reduction family: row sum, row max, column mean of an (M, N) float32 matrix."""
from grader.taskcard import InputSpec, TaskCard

# Chunk loops run over a constexpr trip count (CHUNKS): Triton 3.6's interpreter cannot take
# range() of a runtime scalar argument under NumPy 2, and the GPU compiles one variant per count.
# Row reductions stream each row in BLOCK_N chunks into a [BLOCK_M, BLOCK_N] fp32 accumulator and
# reduce it once at the end, so a long row costs one tree reduction, not one per chunk.
_ROW_REDUCE = '''
import torch, triton, triton.language as tl

@triton.jit
def _row_reduce(x_ptr, y_ptr, M, N, stride, IS_MAX: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CHUNKS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < M
    base = x_ptr + rows[:, None] * stride
    if IS_MAX:
        acc = tl.full([BLOCK_M, BLOCK_N], -float("inf"), tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for chunk in range(CHUNKS):
        cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = row_ok & (cols[None, :] < N)
        if IS_MAX:
            acc = tl.maximum(acc, tl.load(base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32))
        else:
            acc += tl.load(base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if IS_MAX:
        out = tl.max(acc, axis=1)
    else:
        out = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, out.to(y_ptr.dtype.element_ty), mask=rows < M)

def _launch(x, is_max):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty(m, dtype=x.dtype, device=x.device)
    if x.is_cuda:
        bn = min(1024, triton.next_power_of_2(n))
        bm, warps = max(1, 2048 // bn), 4
    else:
        bn = min(4096, triton.next_power_of_2(n))
        bm, warps = triton.next_power_of_2(triton.cdiv(m, 4)), 4
    _row_reduce[(triton.cdiv(m, bm),)](x, y, m, n, x.stride(0), IS_MAX=is_max, BLOCK_M=bm, BLOCK_N=bn,
                                       CHUNKS=triton.cdiv(n, bn), num_warps=warps)
    return y
'''

_ROW_SUM = _ROW_REDUCE + '''
def run(x):
    return _launch(x, False)
'''

_ROW_MAX = _ROW_REDUCE + '''
def run(x):
    return _launch(x, True)
'''

# Column mean: a tall matrix has too few column blocks to fill the GPU, so rows are split over
# SPLIT programs that write fp32 partial sums; a second tiny kernel adds the partials and scales.
_COL_MEAN = '''
import torch, triton, triton.language as tl

@triton.jit
def _col_partial(x_ptr, part_ptr, M, N, stride, rows_per_split,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    split = tl.program_id(1)
    first = split * rows_per_split
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for chunk in range(CHUNKS):
        rows = first + chunk * BLOCK_M + tl.arange(0, BLOCK_M)
        mask = (rows[:, None] < M) & (rows[:, None] < first + rows_per_split) & (cols[None, :] < N)
        acc += tl.load(x_ptr + rows[:, None] * stride + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(part_ptr + split * N + cols, tl.sum(acc, axis=0), mask=cols < N)

@triton.jit
def _col_finish(part_ptr, y_ptr, N, SPLIT, inv_m, BLOCK_S: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    s = tl.arange(0, BLOCK_S)
    mask = (s[:, None] < SPLIT) & (cols[None, :] < N)
    part = tl.load(part_ptr + s[:, None] * N + cols[None, :], mask=mask, other=0.0)
    tl.store(y_ptr + cols, (tl.sum(part, axis=0) * inv_m).to(y_ptr.dtype.element_ty), mask=cols < N)

def run(x):
    x = x.contiguous()
    m, n = x.shape
    if x.is_cuda:
        # Swept on an H200: 64-column strips, 16 rows a step, about 8 programs per multiprocessor.
        bn, bm, warps = min(64, triton.next_power_of_2(n)), 16, 4
        col_blocks = triton.cdiv(n, bn)
        split = max(1, min(triton.cdiv(m, 4 * bm), triton.cdiv(8 * 132, col_blocks)))
    else:
        bn, warps = triton.next_power_of_2(n), 4
        col_blocks, split = 1, min(4, triton.cdiv(m, 16))
        bm = triton.next_power_of_2(triton.cdiv(m, split))
    rows_per_split = triton.cdiv(triton.cdiv(m, split), bm) * bm
    split = triton.cdiv(m, rows_per_split)
    part = torch.empty((split, n), dtype=torch.float32, device=x.device)
    _col_partial[(col_blocks, split)](x, part, m, n, x.stride(0), rows_per_split, BLOCK_M=bm, BLOCK_N=bn,
                                      CHUNKS=rows_per_split // bm, num_warps=warps)
    y = torch.empty(n, dtype=x.dtype, device=x.device)
    fn = min(256, triton.next_power_of_2(n)) if x.is_cuda else triton.next_power_of_2(n)
    _col_finish[(triton.cdiv(n, fn),)](part, y, n, split, 1.0 / m, BLOCK_S=triton.next_power_of_2(split),
                                       BLOCK_N=fn, num_warps=4)
    return y
'''

_X = InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 2.0))

# Error scales of the sums. An fp32 sum rounds every partial sum it forms, so its error follows the
# partial sums, not the result: where the terms cancel (a mean drawn near 0) |result| is about
# sqrt(n) * rms and near 0 in some rows, and an honest accumulator was floored (row_sum_triton_chunked in 3 of
# 3 repeats on an H200, the expert against itself once). The partial sums of any order that does not
# look at the values are sums of random subsets of the terms, so their rounding adds up to about
# 2^-24 * sqrt(n) * ||terms||_2 (measured for sequential, chunked, pairwise and torch orders: at most
# 0.1 of rtol * ||terms||_2 at n = 10007; it would reach 1 only near n ~ 10^6). The 2-norm and not
# sum(|x|), Higham's worst-case magnitude: rounding the terms to fp16 or bf16 alone costs about
# 2^-12 * ||terms||_2, which stays above rtol * ||terms||_2 (1e-4), while rtol * sum(|x|) is sqrt(n)
# times larger and lets an fp16 pairwise sum through on cancelling draws
# (tests/grader/test_reduction_tolerance.py).
_ROW_SUM_SCALE = "import torch\ndef run(x):\n    return x.pow(2).sum(dim=-1).sqrt()\n"
# The mean's error is the sum's divided by M.
_COL_MEAN_SCALE = "import torch\ndef run(x):\n    return x.pow(2).sum(dim=0).sqrt() / x.shape[0]\n"

CARDS = [
    TaskCard(
        task_id="row_sum_fp32",
        family="reduction",
        lineage="kerneltraj/reduction",
        description="Sum over the last axis of an (M, N) float32 matrix, giving (M,).",
        inputs=(_X,),
        output_shape=("M",),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return x.sum(dim=-1)\n",
        expert=_ROW_SUM,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": ({"M": 8192, "N": 4096}, {"M": 32768, "N": 1024})},
        hidden_sizes={"cpu": ({"M": 50, "N": 300},), "gpu": ({"M": 10000, "N": 3000}, {"M": 3000, "N": 10007})},
        bytes_moved="(M * N + M) * E",
        forbidden_ops=("aten::sum",),
        pytorch_ops=("pointwise", "indexing"),
        error_scale=_ROW_SUM_SCALE,
    ),
    TaskCard(
        task_id="row_max_fp32",
        family="reduction",
        lineage="kerneltraj/reduction",
        description="Maximum over the last axis of an (M, N) float32 matrix, giving (M,).",
        inputs=(_X,),
        output_shape=("M",),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return x.amax(dim=-1)\n",
        expert=_ROW_MAX,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 64, "N": 256},), "gpu": ({"M": 8192, "N": 4096}, {"M": 32768, "N": 1024})},
        hidden_sizes={"cpu": ({"M": 50, "N": 300},), "gpu": ({"M": 10000, "N": 3000}, {"M": 3000, "N": 10007})},
        bytes_moved="(M * N + M) * E",
        # x.max(dim=-1) does the same job under another name.
        forbidden_ops=("aten::amax", "aten::max"),
        pytorch_ops=("pointwise", "indexing"),
    ),
    TaskCard(
        task_id="col_mean_fp32",
        family="reduction",
        lineage="kerneltraj/reduction",
        description="Mean over the first axis of an (M, N) float32 matrix, giving (N,).",
        inputs=(_X,),
        output_shape=("N",),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return x.mean(dim=0)\n",
        expert=_COL_MEAN,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 128, "N": 128},), "gpu": ({"M": 8192, "N": 4096}, {"M": 32768, "N": 1024})},
        hidden_sizes={"cpu": ({"M": 100, "N": 150},), "gpu": ({"M": 12345, "N": 2000}, {"M": 1500, "N": 20000})},
        bytes_moved="(M * N + N) * E",
        forbidden_ops=("aten::mean", "aten::sum"),
        pytorch_ops=("pointwise", "indexing"),
        # With these draws atol (1e-5) still covers a mean's rounding (about 2^-24 * rms); the scale
        # keeps that true for longer columns or wider spreads instead of leaving it to chance.
        error_scale=_COL_MEAN_SCALE,
    ),
]
