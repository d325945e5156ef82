"""Scan family: inclusive prefix sum and log-cumsum-exp over the last axis of (M, N) float32."""
from grader.taskcard import InputSpec, TaskCard

# Chunk loops run over a constexpr trip count (CHUNKS): Triton 3.6's interpreter cannot take
# range() of a runtime scalar argument under NumPy 2, and the GPU compiles one variant per count.
# Each program scans BLOCK_M rows chunk by chunk, carrying the running total of the chunks before.
_CUMSUM = '''
import torch, triton, triton.language as tl

@triton.jit
def _cumsum_rows(x_ptr, y_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CHUNKS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < M
    base = rows[:, None].to(tl.int64) * stride
    carry = tl.zeros([BLOCK_M], tl.float32)
    for chunk in range(CHUNKS):
        cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = row_ok & (cols[None, :] < N)
        x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        y = tl.cumsum(x, axis=1) + carry[:, None]
        tl.store(y_ptr + base + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        # The chunk's last prefix (padding adds zeros) is the next carry. Read it out of y rather
        # than `carry += tl.sum(x)`: that form crashes Triton 3.6's thread-locality pass.
        carry = tl.max(tl.where(cols[None, :] == (chunk + 1) * BLOCK_N - 1, y, -float("inf")), axis=1)

def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    if x.is_cuda:
        bn = min(1024, triton.next_power_of_2(n))
        bm, warps = max(1, 2048 // bn), 4
    else:
        bn, bm, warps = min(256, triton.next_power_of_2(n)), triton.next_power_of_2(triton.cdiv(m, 4)), 4
    _cumsum_rows[(triton.cdiv(m, bm),)](x, y, m, n, x.stride(0), BLOCK_M=bm, BLOCK_N=bn,
                                        CHUNKS=triton.cdiv(n, bn), num_warps=warps)
    return y
'''

# Within a chunk: shift by the chunk's maximum, prefix-sum the exps, take the log; across chunks a
# running log-sum-exp carry is merged with log(exp(a) + exp(b)) = max + log(1 + exp(min - max)).
# The shift underflows only where a value sits more than ~87 below its chunk's maximum, far outside
# what the declared inputs (std <= 3) can produce within one chunk.
_LOGCUMSUMEXP = '''
import torch, triton, triton.language as tl

@triton.jit
def _log_add_exp(a, b):
    hi = tl.maximum(a, b)
    # The carry starts at -inf; exp(-inf - hi) = 0 leaves the other argument unchanged.
    return hi + tl.log(1.0 + tl.exp(tl.minimum(a, b) - hi))

@triton.jit
def _logcumsumexp_rows(x_ptr, y_ptr, M, N, stride, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CHUNKS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows[:, None] < M
    base = rows[:, None].to(tl.int64) * stride
    carry = tl.full([BLOCK_M], -float("inf"), tl.float32)
    for chunk in range(CHUNKS):
        cols = chunk * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = row_ok & (cols[None, :] < N)
        x = tl.load(x_ptr + base + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)
        # Rows past M hold only padding: give them zeros so no -inf - -inf NaN is formed.
        x = tl.where(row_ok, x, 0.0)
        chunk_max = tl.max(x, axis=1)
        e = tl.exp(x - chunk_max[:, None])
        y = _log_add_exp(chunk_max[:, None] + tl.log(tl.cumsum(e, axis=1)), carry[:, None])
        tl.store(y_ptr + base + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
        carry = _log_add_exp(carry, chunk_max + tl.log(tl.sum(e, axis=1)))

def run(x):
    x = x.contiguous()
    m, n = x.shape
    y = torch.empty_like(x)
    if x.is_cuda:
        bn = min(1024, triton.next_power_of_2(n))
        bm, warps = max(1, 2048 // bn), 4
    else:
        bn, bm, warps = min(256, triton.next_power_of_2(n)), triton.next_power_of_2(triton.cdiv(m, 4)), 4
    _logcumsumexp_rows[(triton.cdiv(m, bm),)](x, y, m, n, x.stride(0), BLOCK_M=bm, BLOCK_N=bn,
                                              CHUNKS=triton.cdiv(n, bn), num_warps=warps)
    return y
'''

CARDS = [
    TaskCard(
        task_id="cumsum_fp32",
        family="scan",
        lineage="kerneltraj/scan",
        description="Inclusive prefix sum over the last axis of an (M, N) float32 matrix.",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 2.0)),),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return torch.cumsum(x, dim=-1)\n",
        expert=_CUMSUM,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 32, "N": 512},), "gpu": ({"M": 8192, "N": 4096}, {"M": 32768, "N": 1024})},
        hidden_sizes={"cpu": ({"M": 20, "N": 700},), "gpu": ({"M": 10000, "N": 3000}, {"M": 3000, "N": 10007})},
        bytes_moved="2 * M * N * E",
        forbidden_ops=("aten::cumsum",),
        pytorch_ops=("pointwise", "indexing"),
        # Near a zero crossing |reference| is tiny while the rounding of the partial sums is not:
        # the bound scales with the running sum of magnitudes, the scan's condition number.
        error_scale="import torch\ndef run(x):\n    return torch.cumsum(x.abs(), dim=-1)\n",
    ),
    TaskCard(
        task_id="logcumsumexp_fp32",
        family="scan",
        lineage="kerneltraj/scan",
        description="Inclusive log-cumsum-exp, log(sum_{j<=i} exp(x_j)), over the last axis of (M, N) float32.",
        inputs=(InputSpec("x", ("M", "N"), "float32", mean=(-2.0, 2.0), std=(0.5, 3.0)),),
        output_shape=("M", "N"),
        output_dtype="float32",
        reference="import torch\ndef run(x):\n    return torch.logcumsumexp(x, dim=-1)\n",
        expert=_LOGCUMSUMEXP,
        expert_kind="triton",
        public_sizes={"cpu": ({"M": 32, "N": 512},), "gpu": ({"M": 8192, "N": 4096}, {"M": 32768, "N": 1024})},
        hidden_sizes={"cpu": ({"M": 20, "N": 700},), "gpu": ({"M": 10000, "N": 3000}, {"M": 3000, "N": 10007})},
        bytes_moved="2 * M * N * E",
        forbidden_ops=("aten::logcumsumexp", "aten::_logcumsumexp"),
        pytorch_ops=("pointwise", "reduction", "indexing"),
    ),
]
