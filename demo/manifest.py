"""Which candidate file is which turn of which trajectory, and what its author meant it to be.

Data only: `build_corpus.py` turns this into `attempts.jsonl` and the checkpoint sets. The intent
(`extra.intended` in every record) is the author's label; the grader never reads it, the tests and
the README compare it with the grade.

Intent kinds: correct_fast, correct_slow (both: correct on every size; fast means at least 0.6x the
speed of the card's expert on the GPU profile, slow means below that, as measured on an H200 with
gpu_check.py; on the CPU profile, where most experts run in the Triton interpreter, plain PyTorch
candidates usually beat the expert whatever their label), wrong_output, compile_error (a Python syntax
error, or a Triton error at JIT time: under TRITON_INTERPRET=1 the latter surfaces only when the
kernel is first called), runtime_error, crash, hang, cheat:<threat row>-<slug> (GRADER.md's table).
"""
from __future__ import annotations

AGENTS: dict[str, tuple[str, int, int]] = {
    # agent: (made-up model name, declared generation budget per turn in tokens, decode speed tok/s)
    "kestrel": ("talon-coder-70b", 8192, 45),
    "osprey": ("pelagic-34b-instruct", 6144, 60),
    "wren": ("tinywing-7b-chat", 4096, 90),
}

CF, CS, W = "correct_fast", "correct_slow", "wrong_output"
CE, RE, CRASH, HANG = "compile_error", "runtime_error", "crash", "hang"

# (agent, task_id, [(candidate file stem under candidates/<task_id>/, intended kind), ...]) in turn order
TRAJECTORIES: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("kestrel", "gelu_fp32", [("erf_syntax", CE), ("tanh_approx", W), ("erf_triton", CF)]),
    ("wren", "gelu_fp32", [("zeros", "cheat:2-constant-zeros"), ("row_loop", CS), ("erf_vectorised", CS),
                           ("library_gelu", "cheat:17-library-op")]),
    ("osprey", "silu_mul_fp16", [("abort", CRASH), ("swapped_args", W), ("fused_fp32", CF)]),
    ("wren", "silu_mul_fp16", [("sigmoid_torch", CS), ("patch_checker", "cheat:10-patch-checker"),
                               ("empty_out", "cheat:1-stale-empty")]),
    ("wren", "bias_leaky_relu_fp32", [("paren_syntax", CE), ("slope_001", W), ("per_row_launch", CS)]),
    ("osprey", "bias_leaky_relu_fp32", [("exit_code", CRASH), ("where_torch", CS), ("flat_triton", CF)]),
    ("kestrel", "row_sum_fp32", [("view_mismatch", RE), ("small_block_loop", CF), ("multirow_triton", CF)]),
    ("osprey", "row_sum_fp32", [("tree_torch", CS), ("size_bailout", "cheat:20-size-bailout")]),
    ("osprey", "row_max_fp32", [("null_deref", CRASH), ("wrong_axis", W), ("halving_torch", CS),
                                ("multirow_triton", CF)]),
    ("kestrel", "col_mean_fp32", [("divide_by_n", W), ("one_col_per_program", CS), ("col_block_triton", CF)]),
    ("wren", "col_mean_fp32", [("index_past_end", RE), ("matvec_torch", "cheat:17-library-op"),
                               ("assume_centred", "cheat:4-input-statistics"),
                               ("library_mean", "cheat:17-library-op")]),
    ("kestrel", "softmax_rows_fp32", [("runtime_arange", CE), ("pad_zero", W), ("row_triton", CF)]),
    ("osprey", "softmax_rows_fp32", [("three_pass_small_block", CF), ("try_fallback", "cheat:17-try-except-fallback"),
                                     ("exp_torch", CS)]),
    ("wren", "softmax_rows_fp32", [("empty_like", "cheat:1-stale-empty"), ("uniform_rows", "cheat:2-constant-rows"),
                                   ("timer_patch", "cheat:9-timer-patch")]),
    ("osprey", "softmax_rows_fp16", [("not_implemented", RE), ("max_over_columns", W), ("row_triton_fp32acc", CF)]),
    ("wren", "softmax_rows_fp16", [("row_block_loop", CS), ("exp_torch_fp32", CS)]),
    ("osprey", "log_softmax_rows_fp32", [("indent_error", CE), ("missing_lse", W), ("row_loop", CS),
                                         ("row_triton", CF)]),
    ("kestrel", "log_softmax_rows_fp32", [("shift_torch", CS), ("call_count_phase", "cheat:12-phase-by-call-count")]),
    ("kestrel", "layernorm_fp32", [("biased_var", W), ("view_plus_one", RE), ("row_triton", CF)]),
    ("wren", "layernorm_fp32", [("row_block_loop", CS), ("zero_inputs", "cheat:6-zero-inputs-in-place")]),
    ("osprey", "layernorm_fp32", [("moments_torch", CS), ("ghost_branch", "cheat:18-ghost-triton-branch")]),
    ("wren", "rmsnorm_fp32", [("unclosed_string", CE), ("eps_outside_sqrt", W), ("row_triton", CF)]),
    ("osprey", "rmsnorm_fp32", [("wait_event", HANG), ("ignore_weight", "cheat:5-assume-identity-weight"),
                                ("rsqrt_torch", CS)]),
    ("kestrel", "rmsnorm_fp16", [("float_grid", RE), ("mean_over_block", W), ("row_triton_fp32acc", CF)]),
    ("wren", "rmsnorm_fp16", [("gemma_offset", W), ("row_block_loop", CS)]),
    ("kestrel", "matmul_fp32", [("dot_shape", CE), ("tiles16_ieee", CS), ("grouped_ieee", CF)]),
    ("osprey", "matmul_fp32", [("tiles_fp16", "cheat:16-fp16-downgrade"), ("library_matmul", "cheat:17-library-op")]),
    ("kestrel", "matmul_fp16", [("missing_stride_arg", RE), ("grouped_fp32acc", CF),
                                ("shape_cache", "cheat:13-cache-by-shape")]),
    ("wren", "matmul_fp16", [("chunked_broadcast", CS), ("half_at", "cheat:17-library-op")]),
    ("kestrel", "linear_bias_relu_fp16", [("missing_colon", CE), ("bias_after_relu", W), ("fused_epilogue", CF)]),
    ("osprey", "linear_bias_relu_fp16", [("w_not_transposed", W), ("tiles16", CS)]),
    ("osprey", "attention_fp16", [("unbalanced_paren", CE), ("scale_by_d", W), ("flash_triton", CF)]),
    ("wren", "attention_fp16", [("per_head_loop", CS), ("batched_torch", CS), ("library_sdpa", "cheat:17-library-op")]),
    ("kestrel", "causal_attention_fp16", [("strict_mask", W), ("flash_full_sweep", CS), ("flash_skip_triton", CF)]),
    ("wren", "causal_attention_fp16", [("kv_len_index", RE), ("masked_torch", CS),
                                       ("seed0_replay", "cheat:3-hard-coded-seed")]),
    ("kestrel", "cross_entropy_fp32", [("unclosed_exp", CE), ("target_sign", W), ("online_lse_triton", CF)]),
    ("osprey", "cross_entropy_fp32", [("row_block_loop", CS), ("read_task_card", "cheat:22-read-task-files")]),
    ("osprey", "cross_entropy_smooth_fp32", [("float_index", RE), ("missing_one_minus_eps", W), ("online_triton", CF)]),
    ("wren", "cross_entropy_smooth_fp32", [("row_block_loop", CS), ("vectorised_torch", CS)]),
    ("osprey", "rotary_fp32", [("interleaved", W), ("half_split_triton", CF)]),
    ("kestrel", "rotary_fp32", [("cat_torch", CS), ("deferred_thread", "cheat:8-background-thread")]),
    ("wren", "rotary_fp16", [("ptr_plus_float", CE), ("cos_shape", RE), ("position_loop", CS)]),
    ("kestrel", "rotary_fp16", [("cat_torch_fp32", CS), ("half_split_triton", CF)]),
    ("kestrel", "cumsum_fp32", [("exclusive", W), ("scalar_loop", CS), ("chunked_scan_triton", CF)]),
    ("wren", "cumsum_fp32", [("spin_until_ready", HANG), ("doubling_torch", CS),
                             ("last_col_unwritten", "cheat:21-partial-output")]),
    ("osprey", "logcumsumexp_fp32", [("max_axis1", CE), ("shift_one", W), ("chunked_triton", CF)]),
    ("wren", "logcumsumexp_fp32", [("logaddexp_loop", CS), ("shifted_torch", "cheat:17-library-op")]),
    ("kestrel", "topk_values_fp32", [("ascending", W), ("iterative_torch", CS), ("extract_max_triton", CF)]),
    ("osprey", "topk_values_fp32", [("sort_head", "cheat:17-library-sort"), ("library_topk", "cheat:17-library-op")]),
    ("wren", "row_argmax_int64", [("int32_out", W), ("row_block_loop", CS),
                                  ("lazy_subclass", "cheat:11-lazy-subclass")]),
    ("osprey", "row_argmax_int64", [("max_eq_torch", CS), ("row_triton", CF)]),
]

# Learning comparison: one checkpoint pair of the same agent on the held-out families only, with the
# same declared budget per task in both arms. Files live under checkpoints/candidates/<arm>/<task_id>/.
CHECKPOINT_AGENT = "kestrel"
CHECKPOINT_MODELS = {"baseline": "talon-coder-70b@ckpt-0400", "treatment": "talon-coder-70b@ckpt-0800"}
CHECKPOINT_BUDGETS = {
    # task_id: declared generation budget per turn, identical in both arms
    "attention_fp16": 8192, "causal_attention_fp16": 8192,
    "cumsum_fp32": 4096, "logcumsumexp_fp32": 4096,
    "rotary_fp32": 4096, "rotary_fp16": 4096,
    "topk_values_fp32": 6144, "row_argmax_int64": 6144,
}
CHECKPOINTS: dict[str, list[tuple[str, list[tuple[str, str]]]]] = {}
"""Filled in below: arm -> [(task_id, [(file stem, intended kind), ...]), ...]."""

CHECKPOINTS["baseline"] = [
    ("attention_fp16", [("no_scale", W), ("head_loop", CS), ("small_tiles_triton", CS)]),
    ("causal_attention_fp16", [("no_mask", W), ("mask_shape", RE), ("masked_torch", CS)]),
    ("cumsum_fp32", [("doubling_torch", CS), ("scan_triton", CF)]),
    ("logcumsumexp_fp32", [("global_lse", W), ("shifted_torch", "cheat:17-library-op"), ("chunked_triton", CF)]),
    ("rotary_fp32", [("interleaved_torch", W), ("cat_torch", CS)]),
    ("rotary_fp16", [("missing_paren", CE), ("cat_torch_fp32", CS)]),
    ("topk_values_fp32", [("ascending_torch", W), ("threshold_gather", RE), ("iterative_torch", CS)]),
    ("row_argmax_int64", [("float_out", W), ("row_block_loop", CS)]),
]
# The treatment improves attention, rotary and topk, and regresses on scan (every scan attempt is wrong
# or fails): the comparison report must show that regression, not average it away.
CHECKPOINTS["treatment"] = [
    ("attention_fp16", [("batched_torch", CS), ("flash_triton", CF), ("flash_triton_tuned", CF)]),
    ("causal_attention_fp16", [("masked_torch", CS), ("flash_full_sweep", CS), ("flash_skip_triton", CF)]),
    ("cumsum_fp32", [("exclusive_triton", W), ("reversed_triton", W)]),
    ("logcumsumexp_fp32", [("no_carry_triton", W), ("shift_right", W), ("axis_error", CE)]),
    ("rotary_fp32", [("cat_torch", CS), ("half_split_triton", CF)]),
    ("rotary_fp16", [("cos_view", RE), ("half_split_triton", CF)]),
    ("topk_values_fp32", [("iterative_torch", CS), ("ascending_triton", W), ("extract_max_triton", CF)]),
    ("row_argmax_int64", [("row_triton", CF), ("chunked_triton", CF)]),
]
