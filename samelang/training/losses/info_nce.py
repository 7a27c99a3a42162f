"""Cross-lingual retrieval loss of seed 000: InfoNCE with in-batch negatives.

For anchors ``a_i`` (the target-language passages p_tgt_i), candidates ``c_j`` (the English queries
q_en_j; the first ``n`` are the positives, hard negatives may follow, ``m >= n``), cosine ``s`` and
temperature ``tau``:

    L_NCE = -1/n sum_i log( exp(s(a_i, c_i)/tau) / sum_{j not in F_i} exp(s(a_i, c_j)/tau) )

cross-entropy over each row of the (n, m) similarity matrix, the diagonal the label. ``F_i`` is empty in
the seed; ``false_negatives`` (an (n, m) bool mask) may name candidates that also answer anchor ``i``
(another version of its positive), which leave its denominator as in-batch duplicates do in
sentence-transformers (never the label). The same module gives the seed's ``L_NCEpsg`` ablation when
the candidates are the English passages p_en_j.
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
