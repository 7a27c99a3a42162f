"""Candidate generation's own arithmetic: the hybrid score of cosine and BM25 (:func:`fuse`), checked
against hand computation, and one query's BM25 fused through :class:`LexicalQuery` as the
hybrid and fused retrievers use it. The candidates themselves are the pipeline's tests
(tests/service/test_pipeline.py) and the fused retriever's (tests/core/models/test_fused.py)."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.retrieval.candidates import LexicalQuery, best_rows, fuse


def test_fusion_is_the_cosine_plus_the_weighted_normalised_bm25():
    dense = np.array([[0.80, 0.82, 0.79]])
    bm25 = np.array([[10.0, 0.0, 5.0]])
    assert fuse(dense, bm25, 0.1)[0] == pytest.approx([0.90, 0.82, 0.84])
    assert fuse(dense, bm25, 0.0)[0] == pytest.approx(dense[0])  # weight 0: the dense retriever
    # scores of a subset keep the whole index's maximum as their scale
    assert fuse(dense[:, 1:], bm25[:, 1:], 0.1, top=10.0)[0] == pytest.approx([0.82, 0.84])
    assert fuse(dense, np.zeros((1, 3)), 0.5)[0] == pytest.approx(dense[0])  # no term matched: dense order


def test_a_lexical_query_fuses_by_the_same_formula_at_the_whole_indexs_scale():
    scores = np.array([10.0, 0.0, 5.0, 2.0], np.float32)
    q = LexicalQuery(scores, top=20.0, weight=0.1)  # a language filter left the index's best out
    dense = np.array([0.5, 0.6, 0.7])
    rows = np.array([0, 1, 2])
    np.testing.assert_allclose(q.hybrid(dense, rows), fuse(dense, scores[rows], 0.1, top=20.0)[0])
    np.testing.assert_allclose(q.hybrid(dense, rows), [0.55, 0.6, 0.725])
    assert q.best(3).tolist() == best_rows(scores, 3).tolist() == [0, 2, 3]
