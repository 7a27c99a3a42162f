"""Cross-lingual retrieval loss of seed 000: InfoNCE with in-batch negatives.

For anchors ``a_i`` (the target-language passages p_tgt_i) and candidates
``c_j`` (the English queries q_en_j), with cosine similarity ``s`` and
temperature ``tau``:

    L_NCE = -1/n sum_i log( exp(s(a_i, c_i)/tau) / sum_j exp(s(a_i, c_j)/tau) )

i.e. cross-entropy over each row of the (n, n) similarity matrix with the
diagonal as the label: the positive pair is (q_en_i, p_tgt_i), every other
English query in the batch is a negative. The same module gives the seed's
``L_NCEpsg`` ablation when the candidates are the English passages p_en_j.

Candidates may outnumber anchors (``m >= n``: hard negatives appended after the
``n`` positives). ``false_negatives`` (an ``(n, m)`` boolean mask) names the
candidates that also answer an anchor (another version of its positive: a
translation, the same paragraph mined as another row's negative); they leave
its denominator, as in-batch duplicates do in sentence-transformers:

    L = -1/n sum_i log( exp(s(a_i, c_i)/tau) / sum_{j not in F_i} exp(s(a_i, c_j)/tau) )

with ``F_i`` the masked candidates of row ``i`` (never its label ``c_i``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class InfoNCELoss(nn.Module):
    def __init__(self, temperature: float = 0.05):
        super().__init__()
        if temperature <= 0:
            raise ValueError("temperature must be > 0")
        self.temperature = temperature

    def forward(
        self, anchors: torch.Tensor, candidates: torch.Tensor, false_negatives: torch.Tensor | None = None
    ) -> torch.Tensor:
        a = F.normalize(anchors.float(), dim=-1)
        c = F.normalize(candidates.float(), dim=-1)
        logits = a @ c.T / self.temperature
        labels = torch.arange(a.shape[0], device=a.device)
        if false_negatives is not None:
            if false_negatives.shape != logits.shape:
                raise ValueError(f"false_negatives must be {tuple(logits.shape)}, got {tuple(false_negatives.shape)}")
            mask = false_negatives.to(device=a.device, dtype=torch.bool).clone()
            mask[labels, labels] = False  # the label always stays
            logits = logits.masked_fill(mask, float("-inf"))
        return F.cross_entropy(logits, labels)
