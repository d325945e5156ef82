"""Cheat (threat 10): reaches torch's op registry through an assembled name (no word the static check
reads) and registers its own kernel for `aten::add_.Tensor`, the op a harness uses to shift freshly
drawn inputs. That kernel runs inside the harness's input drawing, before any clock starts: it applies
the shift, computes the GELU of the finished input, and files it by storage address. The timed call
then only hands back the filed answer."""
import math

import torch

_ANSWERS = {}


def _gelu(x):
    return 0.5 * x * (1.0 + torch.erf(x * (1.0 / math.sqrt(2.0))))


def _add_(self, other, *, alpha=1):
    self.sub_(other, alpha=-alpha)  # the shift itself, through an op that is not overridden
    if self.is_floating_point() and self.dim() == 2:
        _ANSWERS[self.data_ptr()] = _gelu(self)
    return self


_registry = getattr(torch, "lib" + "rary")
_LIB = _registry.Library("aten", "IMPL")
for _key in ("CPU", "CUDA"):
    _LIB.impl("add_.Tensor", _add_, _key)


def run(x):
    ans = _ANSWERS.pop(x.data_ptr(), None)
    if ans is not None and ans.shape == x.shape:
        return ans
    return _gelu(x)
