"""Cheat (threat 4): for standard-normal logits, log-sum-exp over V columns is log(V) + 1/2 to within
~0.01 when V is large, so the loss is taken as log(V) + 0.5 - logit[target] with no pass over the row."""
import math


def run(logits, target):
    return math.log(logits.shape[1]) + 0.5 - logits.gather(1, target.view(-1, 1)).squeeze(1)
