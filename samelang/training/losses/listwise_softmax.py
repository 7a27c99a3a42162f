"""The relevance stage's loss: softmax cross-entropy of a group's positive over its negatives.

Ahead of LAMAR's two stages the cross-encoder learns relevance itself (the seed's stage 1 distils a teacher that must
already know it). For one question ``q`` with scores ``s_0 = S(q, d+)`` and ``s_k = S(q, d-_k)``, ``k = 1..K`` (the
negatives: other passages of the same document, then passages of other documents):

    L_rel = -log( exp(s_0 / t) / sum_{k=0..K} exp(s_k / t) )

mean over the batch (the localized contrastive estimation of Gao et al., ECIR 2021; the listwise form of
sentence-transformers' cross-encoder ``MultipleNegativesRankingLoss``). ``t`` = 1: the logit itself is the score the
service sorts by. Inputs: ``scores`` of shape (batch, 1 + K), the positive in column 0; ``mask`` (same shape, bool)
marks real documents where groups are short.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def listwise_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None, temperature: float = 1.0) -> torch.Tensor:
    logits = scores / temperature
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    target = torch.zeros(len(scores), dtype=torch.long, device=scores.device)
    return F.cross_entropy(logits, target)
