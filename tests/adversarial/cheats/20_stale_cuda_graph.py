"""Cheat (threat 20, CUDA): captures a CUDA graph of the softmax on the first input of each shape and
replays it on later calls without copying the new input into the graph's static buffer: a harness that
replays one input sees the right values at graph-replay speed; new inputs get the first input's answer."""
import torch
import triton
import triton.language as tl

_GRAPHS = {}


@triton.jit
def _softmax_row(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n)


def _launch(x, y):
    _softmax_row[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))


def run(x):
    if not x.is_cuda:
        y = torch.empty_like(x)
        _launch(x, y)
        return y
    key = tuple(x.shape)
    if key not in _GRAPHS:
        static_x = x.clone()
        static_y = torch.empty_like(x)
        _launch(static_x, static_y)  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _launch(static_x, static_y)
        _GRAPHS[key] = (graph, static_x, static_y)
    graph, static_x, static_y = _GRAPHS[key]
    graph.replay()
    return static_y
