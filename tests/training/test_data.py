"""The triplet builder: deterministic, balanced, never a test article."""

from __future__ import annotations

from collections import Counter

import pytest

from indexes.corpora import load_split
from training.data import TARGET_LANGS, build_align_pairs, build_triplets, dev_articles


def test_triplets_cover_every_target_language_and_no_test_article():
    trip = build_triplets(per_lang=None)
    assert len(trip) == 816 * 11
    assert Counter(t.lang for t in trip) == {x: 816 for x in TARGET_LANGS}
    test = set(load_split()["test_articles"])
    assert not any(t.article in test for t in trip)
    t = trip[0]
    assert t.q_en and t.p_en != t.p_tgt and t.group.startswith("xquad-")


def test_triplets_are_deterministic_and_exclude_dev():
    dev = dev_articles(3)
    a = build_triplets(["zh", "ar"], seed=3, per_lang=50, exclude_articles=dev)
    b = build_triplets(["zh", "ar"], seed=3, per_lang=50, exclude_articles=dev)
    c = build_triplets(["zh", "ar"], seed=4, per_lang=50, exclude_articles=dev)
    assert a == b and a != c and len(a) == 100
    assert not any(t.article in dev for t in a)
    assert set(dev) <= set(load_split()["train_articles"])
    with pytest.raises(ValueError, match="train articles only"):
        build_triplets(split="test")


def test_align_pairs():
    pairs = build_align_pairs(["th", "zh"], per_lang=20, seed=1)
    assert Counter(p.lang for p in pairs) == {"th": 20, "zh": 20}
