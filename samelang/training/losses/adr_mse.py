"""LAMAR's group ranking loss ADR-MSE (seed 002, equations 4-5; Schlatt et al., Rank-DistiLLM, ECIR 2025): for
scores ``s`` of one group ``D`` and labels ``y`` (LAMAR: ``[1, 1, 0, 0]`` for ``[d+_src, d+_tgt, d-_src, d-_tgt]``):

    r_hat_i(s) = 1 + sum_{j != i} sigmoid(s_j - s_i)          (approximate rank, eq. 4)
    r_i(y)     = the average rank of document i under y       (ties share it: [1.5, 1.5, 3.5, 3.5])
    w_i        = 1 / log2(r_i(y) + 1)
    L_rank     = 1/|D| * sum_i w_i * (r_i(y) - r_hat_i(s))^2   (eq. 5)

mean over the batch. Tied positives (and negatives) share a target rank, so the loss orders positives above negatives
and leaves the order inside a parallel pair to the language-coherence loss. It equals sentence-transformers'
``cross_encoder.losses.ADRMSELoss`` (alpha = 1; the tests check it) but takes scores, not a model: LAMAR needs one
forward's scores for both ``L_rank`` and ``L_LC``. Inputs: ``scores`` and ``labels`` of shape (batch, group).
"""

from __future__ import annotations

import torch


def approx_ranks(scores: torch.Tensor) -> torch.Tensor:
    """``1 + sum_{j != i} sigmoid(s_j - s_i)`` per row; the diagonal adds sigmoid(0) = 0.5, removed."""
    diffs = scores.unsqueeze(-2) - scores.unsqueeze(-1)  # [b, i, j] = s_j - s_i
    return 1.0 + torch.sigmoid(diffs).sum(-1) - 0.5


def average_label_ranks(labels: torch.Tensor) -> torch.Tensor:
    """Rank of each document under its labels (higher label first), ties averaged."""
    greater = (labels.unsqueeze(-2) > labels.unsqueeze(-1)).sum(-1).float()
    equal = (labels.unsqueeze(-2) == labels.unsqueeze(-1)).sum(-1).float()  # counts the document itself
    return greater + (equal + 1.0) / 2.0


def adr_mse(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    s = scores.float()
    target = average_label_ranks(labels.to(s.device))
    weight = 1.0 / torch.log2(target + 1.0)
    return (weight * (target - approx_ranks(s)) ** 2).mean()
