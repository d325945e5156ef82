"""Attention family: softmax(q k^T / sqrt(D)) v in fp16, full and causal.

The experts are PyTorch's scaled_dot_product_attention, which dispatches to FlashAttention or
cuDNN on the GPU (cuDNN on an H200 with PyTorch 2.11): the production kernels an attention
candidate has to beat.
"""
from grader.taskcard import InputSpec, TaskCard

_SDPA = '''
import torch

def run(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
'''

_SDPA_CAUSAL = '''
import torch

def run(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
'''

# The references spell the formula out, so they share no code with the experts.
_REF = '''import math, torch
def run(q, k, v):
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v
'''

_REF_CAUSAL = '''import math, torch
def run(q, k, v):
    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v
'''

_FORBIDDEN = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_attention_math",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
    "aten::_cudnn_attention_forward",
)

# Flash kernels round the probabilities to fp16 before the P @ V product and sum S terms in fp32:
# the output (a weighted mean of v, |v| up to about 6) carries absolute errors of a few 2^-11 * |v|,
# which near-zero outputs cannot absorb through rtol.
_TOL = {"float16": (5e-3, 1e-2)}

# q and k with non-zero means: the mean part of q.k is one constant per query row (softmax ignores
# it), so the scores still vary; v's mean shifts every output, so averaging v to 0 does not pass.
_INPUTS = (
    InputSpec("q", ("B", "H", "S", "D"), "float16", mean=(-1.0, 1.0), std=(0.5, 1.5)),
    InputSpec("k", ("B", "H", "S", "D"), "float16", mean=(-1.0, 1.0), std=(0.5, 1.5)),
    InputSpec("v", ("B", "H", "S", "D"), "float16", mean=(-2.0, 2.0), std=(0.5, 2.0)),
)
_CPU = ({"B": 1, "H": 2, "S": 64, "D": 64},)
_CPU_HIDDEN = ({"B": 1, "H": 3, "S": 50, "D": 64},)
_GPU = ({"B": 4, "H": 16, "S": 2048, "D": 64}, {"B": 2, "H": 16, "S": 4096, "D": 64})
_GPU_HIDDEN = ({"B": 3, "H": 12, "S": 1500, "D": 64}, {"B": 1, "H": 40, "S": 3000, "D": 64})

CARDS = [
    TaskCard(
        task_id="attention_fp16",
        family="attention",
        lineage="kerneltraj/attention",
        description="Non-causal attention softmax(q k^T / sqrt(D)) v over (B, H, S, D) float16 tensors.",
        inputs=_INPUTS,
        output_shape=("B", "H", "S", "D"),
        output_dtype="float16",
        reference=_REF,
        expert=_SDPA,
        expert_kind="library",
        public_sizes={"cpu": _CPU, "gpu": _GPU},
        hidden_sizes={"cpu": _CPU_HIDDEN, "gpu": _GPU_HIDDEN},
        bytes_moved="4 * B * H * S * D * E",
        forbidden_ops=_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction", "indexing", "matmul"),
        tolerances=_TOL,
    ),
    TaskCard(
        task_id="causal_attention_fp16",
        family="attention",
        lineage="kerneltraj/attention",
        description="Causal attention (query i sees keys 0..i) over (B, H, S, D) float16 tensors.",
        inputs=_INPUTS,
        output_shape=("B", "H", "S", "D"),
        output_dtype="float16",
        reference=_REF_CAUSAL,
        expert=_SDPA_CAUSAL,
        expert_kind="library",
        public_sizes={"cpu": _CPU, "gpu": _GPU},
        hidden_sizes={"cpu": _CPU_HIDDEN, "gpu": _GPU_HIDDEN},
        bytes_moved="4 * B * H * S * D * E",
        forbidden_ops=_FORBIDDEN,
        pytorch_ops=("pointwise", "reduction", "indexing", "matmul"),
        tolerances=_TOL,
    ),
]
