"""``samelang adapt``'s data, mined from a collection without labels: translations by mutual ratio margin,
inverse cloze queries, groups whose negatives are never a translation of the positive, the held-out
metric, and the decision to serve."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.training import adapt_data as D
from samelang.training.adapt import decide


def _unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_mutual_margin_pairs_find_planted_translations_and_nothing_else():
    rng = np.random.default_rng(0)
    topics = _unit(rng.normal(size=(30, 64)))
    en = _unit(topics + 0.05 * rng.normal(size=topics.shape))
    de = _unit(topics[:20] + 0.05 * rng.normal(size=(20, 64)))  # 20 of the 30 translated
    noise = _unit(rng.normal(size=(10, 64)))  # 10 German documents about nothing English
    x = np.concatenate([en, de, noise])
    langs = ["en"] * 30 + ["de"] * 30
    pairs = D.mutual_margin_pairs(x, langs, block=7)  # several blocks
    assert sorted((i, j) for i, j, _ in pairs) == [(i, 30 + i) for i in range(20)]
    assert all(m >= D.MARGIN for _, _, m in pairs)
    # the same language is never a pair, nor an unknown one
    assert D.mutual_margin_pairs(x, ["en"] * 60) == []
    assert D.mutual_margin_pairs(x, [None] * 30 + ["de"] * 30) == []


def test_translations_take_group_labels_then_margins():
    docs = [D.Doc(0, "a", "A", "en", "g1"), D.Doc(1, "b", "B", "de", "g1"), D.Doc(2, "c", "C", "en", None),
            D.Doc(5, "d", "D", "de", None), D.Doc(6, "e", "E", "fr", None)]  # fmt: skip
    x = _unit(np.array([[1, 0, 0, 0], [1, 0.01, 0, 0], [0, 1, 0, 0], [0, 1, 0.01, 0], [0, 0, 0, 1]], float))
    trans = D.translations(docs, x)
    assert trans[0] == [1] and trans[1] == [0]
    assert trans.get(2) == [5] and trans.get(5) == [2] and 6 not in trans  # rows, not positions


def test_cloze_queries_and_groups_keep_translations_out_of_the_negatives():
    text = "The Rhine flows through Basel. It then reaches Cologne in Germany. Ships carry coal on it."
    docs = [D.Doc(0, "en1", text, "en", None), D.Doc(1, "de1", "Der Rhein fließt durch Basel und Köln.", "de", None),
            D.Doc(2, "en2", "Paris is the capital of France. It lies on the Seine river.", "en", None)]  # fmt: skip
    trans = {0: [1], 1: [0]}
    queries = D.cloze_queries(docs, trans, {0, 1, 2}, seed=0)
    same = [q for q in queries if q.id == "0-same"][0]
    cross = [q for q in queries if q.id == "0-cross"][0]
    assert same.text in text and same.text not in same.positive and same.positive_row == 0
    assert cross.positive == docs[1].text and cross.positive_lang == "de"
    assert not any(q.doc == 1 for q in queries)  # one sentence: no query
    groups = D.ranking_groups([same, cross], [[0, 1, 2], [1, 2, 0]], docs, trans, k=3)
    assert [g.docs[1:] for g in groups] == [(docs[2].text,), (docs[2].text,)]  # the document and its translation
    assert groups[0].keys[0] == groups[1].keys[0] == "0" and groups[0].keys[1] == "2"
    assert D.translation_pairs(docs, trans, {0, 1}) == [D.AlignPair(docs[0].text, docs[1].text, "de")]
    assert D.translation_pairs(docs, trans, {0}) == []  # a held-out document is never trained on


def test_sentences_split_scripts_with_and_without_spaces():
    assert D.sentences("维多利亚和阿尔伯特博物馆位于伦敦。它建于一八五二年，收藏很多艺术品。") == [
        "维多利亚和阿尔伯特博物馆位于伦敦。", "它建于一八五二年，收藏很多艺术品。"]  # fmt: skip
    assert D.sentences("Short. This sentence is long enough to ask about!") == [
        "This sentence is long enough to ask about!"
    ]


def test_dev_metric_counts_only_a_translation_and_leaves_the_document_out():
    q = D.ClozeQuery("7-cross", "q", "en", 7, "p", 9, "de")
    assert D.dev_metrics([q], [[7, 9, 3]], {7: [9]})["found_at_1"] == 100.0  # its own document left out
    at2 = D.dev_metrics([q], [[3, 9]], {7: [9]})
    assert at2["found_at_1"] == 0.0 and at2["mrr_at_10"] == pytest.approx(50.0) and at2["queries"] == 1
    assert D.dev_metrics([D.ClozeQuery("7-same", "q", "en", 7, "p", 7, "en")], [[7]], {}) == {"queries": 0}


def test_the_adapted_model_serves_only_when_it_wins_and_the_guard_holds():
    before, better, worse = {"found_at_1": 50.0, "queries": 9}, {"found_at_1": 60.0, "queries": 9}, {
        "found_at_1": 40.0, "queries": 9}  # fmt: skip
    guard = {"before": {"partial": 80.0, "mono": 97.0}, "after": {"partial": 80.5, "mono": 96.2}}
    assert decide(before, better, guard) == {
        "serve": True, "why": "held-out found@1 +10.0 points; no dev shape dropped over 1"}  # fmt: skip
    assert decide(before, worse, guard)["why"] == "held-out found@1 did not improve (-10.0 points)"
    dropped = {"before": guard["before"], "after": {"partial": 78.5, "mono": 97.0}}
    assert decide(before, better, dropped) == {"serve": False, "why": "the XQuAD dev shape partial dropped 1.5 points"}
    assert not decide(before, {"queries": 0}, {})["serve"]
