"""Rotary family: rotate-half (GPT-NeoX) rotary position embedding of (B, S, H, D) activations.

out = [x1 * cos - x2 * sin, x2 * cos + x1 * sin] with x1 = x[..., :D/2], x2 = x[..., D/2:] and
cos, sin of shape (S, D/2) broadcast over batch and heads.
"""
from grader.taskcard import InputSpec, TaskCard

# Each program rotates BLOCK_R (batch, position, head) rows; both halves of a row are read once and
# cos/sin rows are shared by the H heads of a position (they stay in L2).
_ROTARY = '''
import torch, triton, triton.language as tl

@triton.jit
def _rotary(x_ptr, cos_ptr, sin_ptr, y_ptr, R, S, H, HALF: tl.constexpr, BLOCK_R: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, HALF)
    mask = (rows < R)[:, None]
    pos = (rows // H) % S
    lo = rows[:, None].to(tl.int64) * (2 * HALF) + cols[None, :]
    cs = pos[:, None] * HALF + cols[None, :]
    x1 = tl.load(x_ptr + lo, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_ptr + lo + HALF, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + cs, mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + cs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + lo, (x1 * c - x2 * s).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(y_ptr + lo + HALF, (x2 * c + x1 * s).to(y_ptr.dtype.element_ty), mask=mask)

def run(x, cos, sin):
    x, cos, sin = x.contiguous(), cos.contiguous(), sin.contiguous()
    b, s, h, d = x.shape
    rows = b * s * h
    y = torch.empty_like(x)
    if x.is_cuda:
        block_r, warps = max(1, 4096 // d), 8
    else:
        block_r, warps = triton.next_power_of_2(triton.cdiv(rows, 4)), 4
    _rotary[(triton.cdiv(rows, block_r),)](x, cos, sin, y, rows, s, h, HALF=d // 2, BLOCK_R=block_r,
                                           num_warps=warps)
    return y
'''

_REF = '''import torch
def run(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
'''


def _inputs(dtype: str) -> tuple[InputSpec, ...]:
    # cos and sin are drawn independently (not from real angles): a kernel that derives one from the
    # other, swaps them or gets a sign wrong cannot pass by the identity cos^2 + sin^2 = 1.
    return (InputSpec("x", ("B", "S", "H", "D"), dtype, mean=(-2.0, 2.0), std=(0.5, 2.0)),
            InputSpec("cos", ("S", "D/2"), dtype, mean=(-0.8, 0.8), std=(0.1, 0.5)),
            InputSpec("sin", ("S", "D/2"), dtype, mean=(-0.8, 0.8), std=(0.1, 0.5)))


CARDS = [
    TaskCard(
        task_id="rotary_fp32",
        family="rotary",
        lineage="kerneltraj/rotary",
        description="Rotate-half rotary embedding of x (B, S, H, D) float32 with cos, sin (S, D/2).",
        inputs=_inputs("float32"),
        output_shape=("B", "S", "H", "D"),
        output_dtype="float32",
        reference=_REF,
        expert=_ROTARY,
        expert_kind="triton",
        public_sizes={"cpu": ({"B": 2, "S": 16, "H": 4, "D": 64, "D/2": 32},),
                      "gpu": ({"B": 4, "S": 2048, "H": 16, "D": 128, "D/2": 64},)},
        hidden_sizes={"cpu": ({"B": 1, "S": 24, "H": 3, "D": 128, "D/2": 64},),
                      "gpu": ({"B": 3, "S": 3000, "H": 24, "D": 128, "D/2": 64},
                              {"B": 2, "S": 4097, "H": 32, "D": 64, "D/2": 32})},
        bytes_moved="(2 * B * S * H * D + S * D) * E",
        # No ATen op computes a rotary embedding: the kernel-launch check, not a name, stops a
        # candidate that only strings library ops together.
        forbidden_ops=(),
        pytorch_ops=("pointwise", "indexing"),
    ),
    TaskCard(
        task_id="rotary_fp16",
        family="rotary",
        lineage="kerneltraj/rotary",
        description="Rotate-half rotary embedding of x (B, S, H, D) float16 with cos, sin (S, D/2), fp32 inside.",
        inputs=_inputs("float16"),
        output_shape=("B", "S", "H", "D"),
        output_dtype="float16",
        reference=_REF,
        expert=_ROTARY,
        expert_kind="triton",
        public_sizes={"cpu": ({"B": 2, "S": 16, "H": 4, "D": 64, "D/2": 32},),
                      "gpu": ({"B": 8, "S": 2048, "H": 32, "D": 128, "D/2": 64},)},
        hidden_sizes={"cpu": ({"B": 1, "S": 24, "H": 3, "D": 128, "D/2": 64},),
                      "gpu": ({"B": 5, "S": 3000, "H": 24, "D": 128, "D/2": 64},
                              {"B": 4, "S": 4097, "H": 32, "D": 64, "D/2": 32})},
        bytes_moved="(2 * B * S * H * D + S * D) * E",
        forbidden_ops=(),
        pytorch_ops=("pointwise", "indexing"),
    ),
]
