"""Distribution-level alignment loss of seed 000 (Improving Semantic Proximity, ICLR 2026).

Each embedding is read as a categorical distribution over its dimensions, ``P(z)_i = exp(z_i) / sum_k exp(z_k)``,
and the English and target-language versions of a passage are pulled together by the Jensen-Shannon *distance*:

    M = (P + Q) / 2
    JSD(P || Q) = 1/2 KL(P || M) + 1/2 KL(Q || M)
    L_JSD = mean over the batch of sqrt(JSD(P(z_en) || P(z_tgt))) + eps

sqrt(JSD) is a metric (identity, symmetry, triangle inequality), hence "distance". Inputs: ``z_en``, ``z_tgt`` of
shape (batch, dim): the pooled embeddings of the English and target-language passage, not L2-normalised.
Natural log.
"""

from __future__ import annotations

import torch
from torch import nn


def js_divergence(z_p: torch.Tensor, z_q: torch.Tensor) -> torch.Tensor:
    """Per-row JSD between softmax(z_p) and softmax(z_q) (natural log, in [0, ln 2])."""
    log_p = torch.log_softmax(z_p.float(), dim=-1)
    log_q = torch.log_softmax(z_q.float(), dim=-1)
    p, q = log_p.exp(), log_q.exp()
    log_m = torch.log(0.5 * (p + q))
    kl_pm = (p * (log_p - log_m)).sum(-1)
    kl_qm = (q * (log_q - log_m)).sum(-1)
    return (0.5 * kl_pm + 0.5 * kl_qm).clamp_min(0.0)


class JSDLoss(nn.Module):
    """``L_JSD = mean_b sqrt(JSD(P(z_en_b) || P(z_tgt_b))) + eps``."""

    def __init__(self, eps: float = 1e-8):
        super().__init__()
        self.eps = eps

    def forward(self, z_en: torch.Tensor, z_tgt: torch.Tensor) -> torch.Tensor:
        # eps inside the sqrt as well keeps the gradient finite when both rows are identical
        return torch.sqrt(js_divergence(z_en, z_tgt) + self.eps).mean() + self.eps
