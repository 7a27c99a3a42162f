"""Retrieval and language-coherence metrics (seeds 000 and 002)."""

from samelang.core.metrics.retrieval import comp_at_k, language_gap, max_at_r, max_at_r_norm, mrr_at_k, ndcg_at_k

from samelang.core.metrics.retrieval import rank_matrix, rank_of, ranking, recall_at_k  # isort: skip
from samelang.core.metrics.retrieval import same_language_top1_rate, top1_language_matrix  # isort: skip

__all__ = [
    "comp_at_k", "language_gap", "max_at_r", "max_at_r_norm", "mrr_at_k", "ndcg_at_k", "rank_matrix",
    "rank_of", "ranking", "recall_at_k", "same_language_top1_rate", "top1_language_matrix",
]  # fmt: skip
