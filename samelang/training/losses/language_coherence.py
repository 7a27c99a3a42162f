"""Language-coherence loss of LAMAR (seed 002, section 3.2, equation 6).

For a query in the source language and its parallel document group ``D = [d+_src, d+_tgt, d-_src, d-_tgt]`` with
reranker scores ``s`` in that order:

    L_LC = 1/2 * [ softplus(s+_tgt - s+_src) + softplus(s-_tgt - s-_src) ]

mean over the batch. Within each pair of semantically equivalent documents (the positive pair, the negative pair) it
prefers the one in the query's language, without a hard margin: softplus(x) = log(1 + e^x) keeps pushing gently once
the source-language version leads. When ``src == tgt`` (the Cartesian product includes same-language pairs) both
differences are 0 and the loss is the constant ln 2 with zero gradient.
Input: ``scores`` of shape (batch, 4), columns ``[s+_src, s+_tgt, s-_src, s-_tgt]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LanguageCoherenceLoss(nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if scores.ndim != 2 or scores.shape[1] != 4:
            raise ValueError(f"scores must be (batch, 4) = [s+src, s+tgt, s-src, s-tgt], got {tuple(scores.shape)}")
        s = scores.float()
        return (0.5 * (F.softplus(s[:, 1] - s[:, 0]) + F.softplus(s[:, 3] - s[:, 2]))).mean()
