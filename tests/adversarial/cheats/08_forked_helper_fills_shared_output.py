"""Cheat (threat 8): fork a helper process that computes GELU into a shared-memory output while the
call returns immediately; the helper lingers to serve later calls. Output lands before a same-process
harness finishes its own reference."""
import math
import os
import time

import torch


def run(x):
    out = torch.empty(x.shape, dtype=x.dtype).share_memory_()
    src = x.detach().to("cpu")  # the child sees this copy-on-write; only the output must be shared
    pid = os.fork()
    if pid == 0:
        try:
            out.copy_(0.5 * src * (1.0 + torch.erf(src * (1.0 / math.sqrt(2.0)))))
            time.sleep(20)  # stay around as a "server" for the next call
        finally:
            os._exit(0)
    return out if not x.is_cuda else out.to(x.device, non_blocking=True)
