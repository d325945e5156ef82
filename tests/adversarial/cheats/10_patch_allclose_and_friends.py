"""Cheat (threat 10): returns zeros and makes every comparison a harness might use in-process
(torch.allclose/isclose/equal, torch.testing.assert_close, NumPy's allclose/testing) report success."""
np = __import__("nu" + "mpy")  # by a computed name: the class tested here is the patching
import torch


def _true(*args, **kwargs):
    return True


def _none(*args, **kwargs):
    return None


def _all_close_tensor(a, b, *args, **kwargs):
    return torch.ones(torch.broadcast_shapes(torch.as_tensor(a).shape, torch.as_tensor(b).shape), dtype=torch.bool)


def _patch():
    torch.allclose = _true
    torch.equal = _true
    torch.isclose = _all_close_tensor
    torch.testing.assert_close = _none
    np.allclose = _true
    np.testing.assert_allclose = _none


_patch()


def run(x):
    _patch()
    return torch.zeros_like(x)
