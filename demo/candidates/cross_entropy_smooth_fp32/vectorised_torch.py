import torch


def run(logits, target):
    mx = logits.amax(dim=1, keepdim=True)
    logp = logits - mx - torch.log(torch.exp(logits - mx).sum(dim=1, keepdim=True))
    nll = -logp.gather(1, target[:, None]).squeeze(1)
    return 0.9 * nll - 0.1 * logp.mean(dim=1)
