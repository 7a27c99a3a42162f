"""The reranker evaluation on planted embeddings and scorers with known answers, plus the
reference reproduction of the base bi-encoder's cosine (cheap: no cross-encoder)."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.evaluation.biencoder import Embeddings
from samelang.evaluation.reranker import Pair, cosine_scorer, evaluate_reranker, heatmap_png, markdown

LANGS = ("en", "zh", "th")


def planted() -> Embeddings:
    """60 paragraphs; each language's version is a small perturbation of one shared vector, and
    each query equals its gold paragraph's shared vector: retrieval finds all versions first."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(60, 64))

    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    P = {x: unit(base + 0.05 * rng.normal(size=base.shape)) for x in LANGS}
    gold = rng.integers(0, 60, size=25)
    Q = {x: unit(base[gold] + 0.05 * rng.normal(size=(25, 64))) for x in LANGS}
    return Embeddings(P, Q, gold)


def biased(emb: Embeddings, favourite: str | None):
    """Cosine plus a bonus for one document language (None: for the query's own language)."""
    cos = cosine_scorer(emb)

    def score(pairs: list[Pair]) -> np.ndarray:
        bonus = np.array([float(p.d_lang == (favourite or p.q_lang)) for p in pairs])
        return cos(pairs) + bonus

    return score


def test_language_aware_scorer_is_perfect_and_english_bias_is_caught():
    emb = planted()
    coherent = evaluate_reranker(biased(emb, None), emb, langs=LANGS)
    assert coherent["oracle"]["ndcg_at_1"] == pytest.approx(100.0)
    assert coherent["oracle"]["mean_rank_same_lang"] == pytest.approx(1.0)
    assert coherent["retrieved"]["recall_at_20"] == pytest.approx(100.0)
    assert coherent["retrieved"]["ndcg_at_1"] == pytest.approx(100.0)
    assert coherent["mono_same"]["ndcg_at_10"] == pytest.approx(100.0)
    assert np.allclose(np.diag(coherent["oracle"]["top1_matrix"]["percent"]), 100.0)

    english = evaluate_reranker(biased(emb, "en"), emb, langs=LANGS)
    per = english["oracle"]["per_lang"]
    assert per["en"]["ndcg_at_1"] == pytest.approx(100.0) and per["zh"]["ndcg_at_1"] == 0.0
    assert per["zh"]["mean_rank_same_lang"] >= 2.0 and english["oracle"]["ndcg_at_1"] == pytest.approx(100 / 3)
    m = np.array(english["oracle"]["top1_matrix"]["percent"])
    assert np.allclose(m[:, 0], 100.0)  # every query language's top-1 document is English
    # the English bias pushes zh/th gold below its English version: retrieved nDCG@1 falls, R@20 does not
    assert english["retrieved"]["recall_at_20"] == pytest.approx(100.0)
    assert english["retrieved"]["ndcg_at_1"] == pytest.approx(100 / 3)
    assert english["mono_same"]["ndcg_at_10"] == pytest.approx(100.0)  # one language per pool: no bias to show

    table = markdown({"coherent": coherent, "english-first": english})
    assert "| coherent | 100.00 | 100.00 |" in table and "| english-first | 33.33 |" in table
    png = heatmap_png(english, "english-first")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_max_questions_and_missed_relevant_paragraphs():
    emb = planted()
    r = evaluate_reranker(cosine_scorer(emb), emb, max_questions=5, langs=LANGS)
    assert r["n_questions_per_lang"] == 5
    # a retriever that cannot see a query's gold paragraph: it counts as rank 21, i.e. 0
    far = Embeddings(emb.passages, {x: -v for x, v in emb.queries.items()}, emb.gold)
    r = evaluate_reranker(cosine_scorer(far), far, max_questions=5, langs=LANGS)
    assert r["retrieved"]["recall_at_20"] == 0.0 and r["retrieved"]["ndcg_at_10"] == 0.0
    assert r["retrieved"]["mrr_at_10"] == 0.0


def test_cached_scorer_scores_each_pair_set_once(tmp_path):
    from samelang.evaluation.reranker import cached_scorer

    emb, calls = planted(), []

    def counting(pairs):
        calls.append(len(pairs))
        return cosine_scorer(emb)(pairs)

    pairs = [Pair("en", 0, "zh", 3), Pair("zh", 1, "th", 2)]
    a = cached_scorer(counting, tmp_path, "model-a|max_length=256")
    first = a(pairs)
    np.testing.assert_array_equal(a(pairs), first)
    assert calls == [2]  # the second call read the cache
    cached_scorer(counting, tmp_path, "model-b|max_length=256")(pairs)  # another model: scored again
    a(pairs[:1])  # other pairs: scored again
    assert calls == [2, 2, 1] and len(list(tmp_path.glob("rerank-scores-*.npy"))) == 3
