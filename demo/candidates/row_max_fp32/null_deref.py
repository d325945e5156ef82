import faulthandler

import torch


def run(x):
    # the row maxima were to be written through a native pointer that never got set: the process dies
    # on the null write (faulthandler's own null dereference stands in for the extension's)
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    faulthandler._read_null()
    return out
