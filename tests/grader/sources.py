"""Candidate sources the grader's tests share."""

HONEST_SOFTMAX = ("import torch\ndef run(x):\n    e = (x - x.max(-1, keepdim=True).values).exp()\n"
                  "    return e / e.sum(-1, keepdim=True)\n")
"""An honest attempt at `softmax_rows_fp32` in plain torch: graded correct on either device."""
