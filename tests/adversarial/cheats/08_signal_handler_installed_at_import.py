"""Cheat (threat 8): the SIGALRM deferral of 08_signal_itimer_fills_after_return with the handler
installed when the module is imported; each call only arms a 20 ms timer and returns an empty
tensor, and the handler computes the row maxima (top-1 values) after the call has returned."""
import signal

import torch

_PENDING = []


def _on_alarm(signum, frame):
    while _PENDING:
        x, out = _PENDING.pop()
        out.copy_(torch.topk(x, 1, dim=-1).values.view(-1))


signal.signal(signal.SIGALRM, _on_alarm)


def run(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _PENDING.append((x, out))
    signal.setitimer(signal.ITIMER_REAL, 0.02)
    return out
