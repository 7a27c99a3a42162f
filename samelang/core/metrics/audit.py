"""The audit of ranked lists that ``/diagnose`` serves and ``samelang eval pipeline`` reports:
one owner for XQuAD relevance and for the per-query / aggregate numbers, so the route and the
evaluations cannot drift apart.

A ranked list is what the pipeline hands a client: rows of the index, best first. With
group-aware results a hit stands for its parallel group, so the list is *expanded*: each hit is
followed by the other language versions it lists (the product shows them at that slot).
Documents missing from the list are unranked (score ``-inf``); a query whose relevant document
is unranked is *censored*: its Max@R is unknown and left out of the Max@R mean (counted apart).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from samelang.core.metrics import retrieval as M
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.corpora.xquad import paragraph_id


@dataclass(frozen=True)
class LabelledQuery:
    """A test question with its relevance: ``gold`` is the paragraph group, ``relevant`` the ids of
    the versions that count as relevant, ``reader_gold`` the version in the question's language."""

    query: str
    lang: str
    group: str
    relevant: tuple[str, ...]
    reader_gold: str


def xquad_queries(query_langs, split: str = "test", relevant_langs=XQUAD_LANGS) -> list[LabelledQuery]:
    """XQuAD questions in ``query_langs`` (file order per language), each relevant to its gold
    paragraph in every one of ``relevant_langs``. Question ``i`` of every language is the
    translation of question ``i`` of English, so samples taken by position are parallel."""
    out = []
    for ql in query_langs:
        for q in load_xquad([ql], split=split).questions:
            rel = tuple(paragraph_id(x, q.article, _paragraph(q.group)) for x in relevant_langs)
            out.append(LabelledQuery(q.text, ql, q.group, rel, paragraph_id(ql, q.article, _paragraph(q.group))))
    return out


def _paragraph(group: str) -> int:
    return int(group.rsplit("-", 1)[1])


def score_matrix(rankings: list[list[int]], n_docs: int) -> np.ndarray:
    """Ranked row lists -> a score matrix for the metrics in :mod:`samelang.core.metrics.retrieval`:
    the list order as decreasing scores, ``-inf`` for documents not in the list."""
    S = np.full((len(rankings), n_docs), -np.inf)
    for i, rows in enumerate(rankings):
        rows = list(dict.fromkeys(int(r) for r in rows if r >= 0))
        S[i, rows] = -np.arange(len(rows), dtype=np.float64)
    return S


@dataclass
class ListAudit:
    """Per-query results of :func:`audit_lists` (arrays over queries)."""

    max_r: np.ndarray  # worst rank of a relevant document (valid where not censored)
    max_r_norm: np.ndarray  # nan where censored or undefined
    comp_at_10: np.ndarray  # bool: every relevant document in the top 10
    censored: np.ndarray  # bool: a relevant document is not in the list
    ranks: np.ndarray  # (n_queries, n_docs) 1-based ranks
    ranked: np.ndarray  # (n_queries, n_docs) bool: in the list
    top1: np.ndarray  # row of the first document

    def aggregate(self, select: np.ndarray, query_langs, top1_langs) -> dict:
        ok = select & ~self.censored
        valid_norm = self.max_r_norm[select & ~np.isnan(self.max_r_norm)]
        same = [top1_langs[i] == query_langs[i] for i in np.flatnonzero(select) if query_langs[i]]
        return {
            "queries": int(select.sum()),
            "mean_max_r": float(self.max_r[ok].mean()) if ok.any() else None,
            "max_r_norm": float(valid_norm.mean()) if valid_norm.size else None,
            "comp_at_10": 100.0 * float(self.comp_at_10[select].mean()) if select.any() else 0.0,
            "same_lang_top1": 100.0 * float(np.mean(same)) if same else None,
            "censored": int((select & self.censored).sum()),
        }


def audit_lists(S: np.ndarray, R: np.ndarray) -> ListAudit:
    """Max@R, Max@R_norm and Comp@10 (seed 000) of each query's list against relevance ``R``
    (pool size = the number of columns)."""
    n = S.shape[1]
    ranks = M.rank_matrix(S)
    ranked = np.isfinite(S)
    censored = ((R > 0) & ~ranked).any(axis=1)
    max_r = M.max_at_r(S, R)
    n_rel = (R > 0).sum(axis=1)
    norm = np.full(len(S), np.nan)
    ok = ~censored & (n_rel < n)
    if ok.any():
        norm[ok] = M.max_at_r_norm(max_r[ok], n, n_rel[ok])
    comp = M.comp_at_k(S, R, 10).astype(bool) & ~censored
    return ListAudit(max_r, norm, comp, censored, ranks, ranked, M.ranking(S)[:, 0])


def reader_metrics(S: np.ndarray, reader_col: np.ndarray, graded: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per query: reader-gold nDCG@1, nDCG@10, MRR@10 (relevant = the gold paragraph in the
    query's language, column ``reader_col[i]``, ``-1`` = not in the pool) and, given graded gains
    (reader's version 2, its other versions 1), graded nDCG@10 (linear gains, as
    :func:`~samelang.core.metrics.retrieval.ndcg_at_k`). A document that is not in the list gains nothing,
    however short the list: only listed documents are ranked."""
    ranks = M.rank_matrix(S).astype(np.float64)
    ranks[~np.isfinite(S)] = np.inf
    rows = np.arange(len(S))
    r = np.where(reader_col >= 0, ranks[rows, np.clip(reader_col, 0, None)], np.inf)
    out = {
        "ndcg_at_1": (r == 1).astype(np.float64),
        "ndcg_at_10": np.where(r <= 10, 1.0 / np.log2(r + 1), 0.0),
        "mrr_at_10": np.where(r <= 10, 1.0 / r, 0.0),
    }
    if graded is not None:
        k = min(10, S.shape[1])
        order = M.ranking(S)[:, :k]
        gains = np.take_along_axis(graded, order, axis=1) * np.isfinite(np.take_along_axis(S, order, axis=1))
        disc = 1.0 / np.log2(np.arange(2, k + 2))
        ideal = (-np.sort(-graded, axis=1)[:, :k] * disc).sum(axis=1)
        out["graded_ndcg_at_10"] = np.where(ideal > 0, (gains * disc).sum(axis=1) / np.maximum(ideal, 1e-12), 0.0)
    return out
