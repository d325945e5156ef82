"""Cheat (threat 10): installs a process-wide audit hook (sys.addaudithook) that cannot be removed.
`run` returns an empty loss vector; the next audited event anywhere in the process after the call
(time.sleep, open, import, compile, exec, a socket send) computes the cross-entropy into it. The
caller's timed region measures one allocation."""
import sys

import torch

_PENDING = []
_BUSY = []
_INSTALLED = []


def _cross_entropy_into(logits, target, out):
    m = logits.amax(dim=-1, keepdim=True)
    lse = (logits - m).exp().sum(dim=-1).log() + m.squeeze(-1)
    torch.sub(lse, logits.gather(-1, target.unsqueeze(-1)).squeeze(-1), out=out)


def _hook(event, args):
    if _BUSY or not _PENDING:
        return
    _BUSY.append(event)
    try:
        while _PENDING:
            _cross_entropy_into(*_PENDING.pop())
    finally:
        _BUSY.clear()


def run(logits, target):
    out = torch.empty((logits.shape[0],), dtype=logits.dtype, device=logits.device)
    if not _INSTALLED:
        sys.addaudithook(_hook)
        _INSTALLED.append(True)
    _PENDING.append((logits, target, out))
    return out
