"""Metrics against hand-computed cases, and nDCG/MRR/Recall against pytrec_eval."""

from __future__ import annotations

import math

import numpy as np
import pytest
import pytrec_eval  # the `test` extra declares pytrec-eval-terrier: missing is an error, not a skip

from samelang.core import metrics as M

# two queries over five documents; rows are scores
SCORES = np.array(
    [
        [0.9, 0.1, 0.8, 0.3, 0.2],  # ranking: d0 d2 d3 d4 d1
        [0.1, 0.5, 0.4, 0.9, 0.2],  # ranking: d3 d1 d2 d4 d0
    ]
)
REL = np.array(
    [
        [1, 0, 0, 0, 1],  # relevant d0 (rank 1), d4 (rank 4)
        [0, 1, 0, 0, 0],  # relevant d1 (rank 2)
    ]
)


def test_rank_matrix_and_ties():
    np.testing.assert_array_equal(M.rank_matrix(SCORES)[0], [1, 5, 2, 3, 4])
    # ties keep column order; -inf ranks last
    np.testing.assert_array_equal(M.rank_matrix([[0.5, 0.5, -np.inf, 0.7]])[0], [2, 3, 4, 1])


def test_max_at_r_and_comp():
    np.testing.assert_array_equal(M.max_at_r(SCORES, REL), [4, 2])
    np.testing.assert_array_equal(M.comp_at_k(SCORES, REL, k=3), [0.0, 1.0])
    np.testing.assert_array_equal(M.comp_at_k(SCORES, REL, k=4), [1.0, 1.0])


def test_max_at_r_norm_hand_computed():
    # |D| = 5: query 0 has |R| = 2, Max@R = 4; query 1 |R| = 1, Max@R = 2
    got = M.max_at_r_norm([4, 2], 5, [2, 1])
    want = [
        100 * (math.log2(5) - 2) / (math.log2(5) - 1),
        100 * (math.log2(5) - 1) / (math.log2(5) - 0),
    ]
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(M.max_at_r_norm([2, 480], 480, 2), [100.0, 0.0])
    with pytest.raises(ValueError):
        M.max_at_r_norm([1], 480, 2)  # Max@R below |R| is impossible


def test_ndcg_hand_computed():
    # query 0: gains at ranks 1..5 = [1, 0, 0, 1, 0]; ideal [1, 1]
    dcg = 1 + 1 / math.log2(5)
    idcg = 1 + 1 / math.log2(3)
    assert M.ndcg_at_k(SCORES, REL, k=10)[0] == pytest.approx(dcg / idcg)
    assert M.ndcg_at_k(SCORES, REL, k=1)[0] == pytest.approx(1.0)
    assert M.ndcg_at_k(SCORES, REL, k=3)[0] == pytest.approx(1 / idcg)
    # query 1: single relevant at rank 2
    assert M.ndcg_at_k(SCORES, REL, k=10)[1] == pytest.approx(1 / math.log2(3))
    # graded gains: gain 2 at rank 2, gain 1 at rank 1
    g = M.ndcg_at_k([[0.9, 0.8, 0.1]], [[1, 2, 0]], k=2)[0]
    assert g == pytest.approx((1 + 2 / math.log2(3)) / (2 + 1 / math.log2(3)))


def test_mrr_recall_rank_of():
    np.testing.assert_allclose(M.mrr_at_k(SCORES, REL, k=10), [1.0, 0.5])
    np.testing.assert_allclose(M.mrr_at_k(SCORES, REL, k=1), [1.0, 0.0])
    np.testing.assert_allclose(M.recall_at_k(SCORES, REL, k=3), [0.5, 1.0])
    np.testing.assert_array_equal(M.rank_of(SCORES, [4, 0]), [4, 5])


def test_language_matrices():
    qlang = ["zh", "en"]
    dlang = ["en", "zh", "zh", "en", "zh"]
    # query 0 top-1 = d0 (en); query 1 top-1 = d3 (en)
    m, rows, cols = M.top1_language_matrix(SCORES, qlang, dlang, langs=["en", "zh"])
    assert rows == cols == ["en", "zh"]
    np.testing.assert_array_equal(m, [[100.0, 0.0], [100.0, 0.0]])
    np.testing.assert_array_equal(M.same_language_top1_rate(SCORES, qlang, dlang), [0.0, 1.0])
    assert M.language_gap(90.0, 86.5) == pytest.approx(3.5)


def test_queries_without_relevant_documents_are_an_error():
    with pytest.raises(ValueError, match="no relevant"):
        M.max_at_r(SCORES, np.zeros_like(REL))
    with pytest.raises(ValueError, match="differ in shape"):
        M.ndcg_at_k(SCORES, REL[:, :3])


def test_against_pytrec_eval_on_random_rankings():
    rng = np.random.default_rng(7)
    nq, nd = 60, 40
    scores = rng.random((nq, nd))
    rel = rng.integers(0, 4, size=(nq, nd)) * (rng.random((nq, nd)) < 0.15)
    rel[np.arange(nq), rng.integers(0, nd, nq)] = rng.integers(1, 4, nq)  # at least one relevant each
    qrels = {f"q{i}": {f"d{j}": int(rel[i, j]) for j in range(nd) if rel[i, j] > 0} for i in range(nq)}
    run = {f"q{i}": {f"d{j}": float(scores[i, j]) for j in range(nd)} for i in range(nq)}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10"}).evaluate(run)
    # MRR@10: recip_rank on the run cut to its top 10
    top10 = {q: dict(sorted(d.items(), key=lambda kv: -kv[1])[:10]) for q, d in run.items()}
    ref_rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top10)
    ours_ndcg = M.ndcg_at_k(scores, rel, 10)
    ours_mrr = M.mrr_at_k(scores, rel, 10)
    ours_rec = M.recall_at_k(scores, rel, 10)
    for i in range(nq):
        q = f"q{i}"
        assert ours_ndcg[i] == pytest.approx(ref[q]["ndcg_cut_10"], abs=1e-4)
        assert ours_rec[i] == pytest.approx(ref[q]["recall_10"], abs=1e-4)
        assert ours_mrr[i] == pytest.approx(ref_rr[q]["recip_rank"], abs=1e-4)
    # the comparison is not vacuous: the metrics vary across queries
    assert ours_ndcg.std() > 0.05 and ours_mrr.std() > 0.05
