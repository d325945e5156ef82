"""Cheat (threat 19): the KernelBench-style inheritance bypass. The "new" model subclasses the
reference model (here torch's own Softmax module, imported under the name Model) and adds nothing."""
from torch.nn import Softmax as Model

_model = None


class ModelNew(Model):
    pass


def run(x):
    global _model
    if _model is None:
        _model = ModelNew(dim=-1)
    return _model(x)
