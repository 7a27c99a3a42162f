"""Ranking metrics, vectorised over a score matrix, exactly as the seeds define them.

Conventions for every function here:

* ``scores`` is ``(n_queries, n_docs)``: higher is better; ``-inf`` marks a
  document that was not retrieved for that query (it ranks last).
* ``relevance`` is ``(n_queries, n_docs)`` of non-negative gains; ``> 0`` is
  relevant. Boolean masks are accepted.
* Ranks are 1-based. Ties are broken by document column order (a stable sort
  of ``-scores``), so a metric never depends on the sort implementation.
* Per-query functions return arrays; aggregate with ``.mean()``. Percentages
  (``*100``) only where the seed reports them so.
"""

from __future__ import annotations

import numpy as np


def _as_2d(a, name: str, dtype=None) -> np.ndarray:
    arr = np.asarray(a, dtype=dtype)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n_queries, n_docs), got shape {arr.shape}")
    return arr


def _check(scores, relevance) -> tuple[np.ndarray, np.ndarray]:
    s = _as_2d(scores, "scores", np.float64)
    r = _as_2d(relevance, "relevance", np.float64)
    if s.shape != r.shape:
        raise ValueError(f"scores {s.shape} and relevance {r.shape} differ in shape")
    if (r < 0).any():
        raise ValueError("relevance gains must be >= 0")
    return s, r


def ranking(scores) -> np.ndarray:
    """Column indices of each row sorted best first (ties: lower column first)."""
    s = _as_2d(scores, "scores", np.float64)
    return np.argsort(-s, axis=1, kind="stable")


def rank_matrix(scores) -> np.ndarray:
    """``ranks[q, d]`` = 1-based rank of document ``d`` for query ``q``."""
    order = ranking(scores)
    ranks = np.empty_like(order)
    rows = np.arange(order.shape[0])[:, None]
    ranks[rows, order] = np.arange(1, order.shape[1] + 1)[None, :]
    return ranks


def _need_relevant(r: np.ndarray) -> np.ndarray:
    n_rel = (r > 0).sum(axis=1)
    if (n_rel == 0).any():
        raise ValueError(f"{int((n_rel == 0).sum())} queries have no relevant document")
    return n_rel


def max_at_r(scores, relevance) -> np.ndarray:
    """Max@R (seed 000): the worst rank among all relevant documents of a query,

    ``Max@R = max{ i | d'_i in R_q }`` for the ranking ``D'(q) = (d'_1, ..., d'_n)``.
    Lower is better; the best value is ``|R_q|``.
    """
    s, r = _check(scores, relevance)
    _need_relevant(r)
    ranks = rank_matrix(s)
    return np.where(r > 0, ranks, 0).max(axis=1)


def max_at_r_norm(max_r, n_docs: int, n_relevant) -> np.ndarray:
    """Max@R_norm per query (seed 000), averaged over queries by the caller:

    ``100 * (log2|D| - log2 Max@R) / (log2|D| - log2|R|)``: 100 when all
    relevant documents fill the top ``|R|`` places, 0 when one is last.
    """
    m = np.asarray(max_r, dtype=np.float64)
    n_rel = np.broadcast_to(np.asarray(n_relevant, dtype=np.float64), m.shape)
    if (n_rel >= n_docs).any():
        raise ValueError("Max@R_norm needs |R| < |D|")
    if ((m < n_rel) | (m > n_docs)).any():
        raise ValueError("Max@R must lie in [|R|, |D|]")
    log_d = np.log2(n_docs)
    return 100.0 * (log_d - np.log2(m)) / (log_d - np.log2(n_rel))


def comp_at_k(scores, relevance, k: int = 10) -> np.ndarray:
    """Comp@k (seed 000): 1 where *all* relevant documents are within the top k.

    Report ``100 * comp_at_k(...).mean()`` (% of queries).
    """
    return (max_at_r(scores, relevance) <= k).astype(np.float64)


def ndcg_at_k(scores, relevance, k: int = 10) -> np.ndarray:
    """nDCG@k with graded, linear gains (as trec_eval / pytrec_eval ``ndcg_cut``):

    ``DCG@k = sum_{i=1..k} rel_i / log2(i + 1)``, ``nDCG@k = DCG@k / IDCG@k``
    where ``IDCG@k`` is the DCG of the ideal ordering of all judged gains.
    """
    s, r = _check(scores, relevance)
    _need_relevant(r)
    k = min(k, s.shape[1])
    order = ranking(s)[:, :k]
    gains = np.take_along_axis(r, order, axis=1)
    disc = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (gains * disc).sum(axis=1)
    ideal = -np.sort(-r, axis=1)[:, :k]
    return dcg / (ideal * disc).sum(axis=1)


def mrr_at_k(scores, relevance, k: int = 10) -> np.ndarray:
    """Reciprocal rank of the first relevant document if it is within the top k, else 0."""
    s, r = _check(scores, relevance)
    _need_relevant(r)
    ranks = rank_matrix(s)
    first = np.where(r > 0, ranks, np.iinfo(ranks.dtype).max).min(axis=1)
    return np.where(first <= k, 1.0 / first, 0.0)


def recall_at_k(scores, relevance, k: int = 10) -> np.ndarray:
    """Fraction of a query's relevant documents found in the top k."""
    s, r = _check(scores, relevance)
    n_rel = _need_relevant(r)
    ranks = rank_matrix(s)
    return ((r > 0) & (ranks <= k)).sum(axis=1) / n_rel


def rank_of(scores, doc_index) -> np.ndarray:
    """1-based rank of one designated document per query (``doc_index[q]``).

    The mean over queries is the seed 002 "mean rank of the same-language document".
    """
    s = _as_2d(scores, "scores", np.float64)
    idx = np.asarray(doc_index, dtype=np.int64)
    if idx.shape != (s.shape[0],):
        raise ValueError(f"doc_index must have one entry per query ({s.shape[0]}), got {idx.shape}")
    ranks = rank_matrix(s)
    return ranks[np.arange(s.shape[0]), idx]


def top1_language_matrix(scores, query_langs, doc_langs, langs=None) -> tuple[np.ndarray, list[str], list[str]]:
    """Top-1 language distribution: rows = query language, columns = language of
    the top-ranked document, cells = % of that row's queries (rows sum to 100).

    Returns ``(matrix, row_langs, col_langs)``.
    """
    s = _as_2d(scores, "scores", np.float64)
    ql = np.asarray(query_langs, dtype=object)
    dl = np.asarray(doc_langs, dtype=object)
    if ql.shape != (s.shape[0],) or dl.shape != (s.shape[1],):
        raise ValueError("query_langs / doc_langs must match the score matrix's rows / columns")
    rows = list(langs) if langs is not None else sorted(set(ql.tolist()))
    cols = list(langs) if langs is not None else sorted(set(dl.tolist()))
    top_lang = dl[ranking(s)[:, 0]]
    m = np.zeros((len(rows), len(cols)))
    for i, lq in enumerate(rows):
        sel = ql == lq
        if sel.any():
            for j, ld in enumerate(cols):
                m[i, j] = 100.0 * (top_lang[sel] == ld).mean()
    return m, rows, cols


def same_language_top1_rate(scores, query_langs, doc_langs) -> np.ndarray:
    """1 where the top-ranked document is in the query's language."""
    s = _as_2d(scores, "scores", np.float64)
    dl = np.asarray(doc_langs, dtype=object)
    return (dl[ranking(s)[:, 0]] == np.asarray(query_langs, dtype=object)).astype(np.float64)


def language_gap(english: float, target: float) -> float:
    """En/target gap (seed 000): absolute difference of a metric between English
    queries and target-language queries on the same pool, in the metric's units."""
    return abs(float(english) - float(target))
