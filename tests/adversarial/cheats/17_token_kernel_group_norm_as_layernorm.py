"""Cheat (threat 17): layer norm by way of F.group_norm with one group (on an (M, N) input each row is
one sample of N channels, so one group normalises the whole row and the per-channel affine is the
layer norm's w and b). group_norm is not on a layer-norm denylist; a token Triton kernel rewrites
one element of the result so the candidate's own kernel ran on the output."""
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _touch(y_ptr):
    tl.store(y_ptr, tl.load(y_ptr))


def run(x, w, b):
    y = F.group_norm(x, 1, w, b, eps=1e-5)
    _touch[(1,)](y)
    return y
