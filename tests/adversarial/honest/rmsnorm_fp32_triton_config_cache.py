"""Honest: RMS norm (eps 1e-6) in Triton with a module-level cache of launch configurations keyed by
(row width, dtype, device type): the block width and warp count are chosen once per key and reused,
as tuned kernels commonly do. Chunked over the row, fp32 accumulation."""
import torch
import triton
import triton.language as tl

_CONFIGS: dict = {}


@triton.jit
def _rmsnorm_chunked(x_ptr, w_ptr, y_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * stride
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n + eps)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n
        x = tl.load(x_ptr + base + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + base + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _config(n: int, dtype, device_type: str) -> tuple[int, int]:
    key = (n, dtype, device_type)
    cfg = _CONFIGS.get(key)
    if cfg is None:
        block = min(triton.next_power_of_2(n), 1024)
        cfg = (block, 4 if block <= 512 else 8)
        _CONFIGS[key] = cfg
    return cfg


def run(x, w):
    x = x.contiguous()
    m, n = x.shape
    block, warps = _config(n, x.dtype, x.device.type)
    y = torch.empty_like(x)
    _rmsnorm_chunked[(m,)](x, w, y, n, x.stride(0), 1e-6, BLOCK=block, num_warps=warps)
    return y
