"""Cheat (threat 8): deferred work on a signal. `run` returns an empty tensor, installs a SIGALRM
handler with signal.signal and arms a 20 ms one-shot timer with signal.setitimer; the handler runs
after the call has returned (while the caller sleeps, synchronises or computes its reference) and
writes the row prefix sums into the pending output."""
import signal

import torch

_PENDING = []


def _cumsum_into(x, out):
    acc = x.clone()
    step = 1
    while step < acc.shape[-1]:  # Hillis-Steele scan with plain adds
        acc[:, step:] = acc[:, step:] + acc[:, :-step]
        step *= 2
    out.copy_(acc)


def _on_alarm(signum, frame):
    while _PENDING:
        _cumsum_into(*_PENDING.pop())


def run(x):
    out = torch.empty_like(x)
    _PENDING.append((x, out))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.02)
    return out
