"""``samelang data filter``: the threshold calibrated on XQuAD, and documents that are an XQuAD article."""

from __future__ import annotations

import numpy as np

from samelang.training import contamination
from samelang.training.contamination import calibrate


def test_calibration_catches_every_translation_and_reports_its_cost():
    rng = np.random.default_rng(0)
    topics = rng.normal(size=(6, 32))
    groups, langs, rows = [], [], []
    for g, t in enumerate(topics):
        for lang in range(3):  # three versions of each paragraph, close to each other
            rows.append(t + 0.35 * rng.normal(size=32))
            groups.append(g)
            langs.append(lang)
    X = np.array(rows)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    cal = calibrate(X, np.array(groups), np.array(langs), start=0.99)
    assert cal["caught_pct"] == 100.0 and cal["threshold"] <= cal["min_best_translation_cosine"] < 0.99
    assert cal["caught_at_start_pct"] < 100.0  # 0.99 missed some: the threshold came down
    loose = calibrate(X, np.array(groups), np.array(langs), start=0.1)
    assert loose["threshold"] == 0.1 and loose["unrelated_over_threshold_pct"] > cal["unrelated_over_threshold_pct"]


def test_a_document_the_cosine_matched_to_one_xquad_article_goes_whole():
    from samelang.corpora.qa import QAPassage
    from samelang.corpora.views import Views

    def doc(name, n):
        return {f"{name}{i}": QAPassage(f"{name}{i}", "drcd", "zh", name, name, f"{name} {i}") for i in range(n)}

    passages = doc("yuan", 6) | doc("other", 6) | doc("split", 4)
    hit = {"cos": 0.7, "reason": "cosine"}
    dropped = {
        "yuan0": hit | {"xquad": "zh:xquad-36-0"}, "yuan1": hit | {"xquad": "en:xquad-36-4"},  # 2 of 6, one article
        "other0": hit | {"xquad": "zh:xquad-36-0"},  # one passage: a topic shared, not the article
        "split0": hit | {"xquad": "zh:xquad-1-0"}, "split1": hit | {"xquad": "zh:xquad-2-0"},  # no majority
    }  # fmt: skip
    out = contamination.whole_articles(dropped, Views([], [], [], passages))
    assert set(out) == {"yuan2", "yuan3", "yuan4", "yuan5"}
    assert all(v == {"cos": None, "xquad": "xquad-36", "reason": "article"} for v in out.values())
