"""The label-free language-bias audit against its formulas, computed by hand."""

from __future__ import annotations

import math

import pytest

from samelang.core.metrics.language_bias import jsd_bits, language_bias


def kl_bits(p, q):
    return sum(a * math.log2(a / b) for a, b in zip(p, q) if a > 0)


def test_jsd_is_the_mean_kl_to_the_midpoint_in_bits():
    p, q = [1.0, 0.0], [0.75, 0.25]
    m = [(a + b) / 2 for a, b in zip(p, q)]
    assert jsd_bits(p, q) == pytest.approx(0.5 * kl_bits(p, m) + 0.5 * kl_bits(q, m))
    assert jsd_bits(p, p) == pytest.approx(0.0, abs=1e-12)
    assert jsd_bits([1.0, 0.0], [0.0, 1.0]) == pytest.approx(1.0)  # no language in common: the bound


def test_language_bias_pools_each_query_languages_lists():
    # a collection of 6 en and 2 zh documents; two zh readers see only English, one en reader a zh result
    docs = ["en"] * 6 + ["zh"] * 2
    out = language_bias(["zh", "zh", "en"], [["en", "en", "zh"], ["en", "en", "en"], ["en", "zh"]], docs, k=2)
    assert out.index_langs == {"en": 75.0, "zh": 25.0}
    assert out.queries == {"en": 1, "zh": 2}
    assert out.result_langs == {"en": {"en": 50.0, "zh": 50.0}, "zh": {"en": 100.0, "zh": 0.0}}  # top 2 only
    assert out.jsd["zh"] == pytest.approx(jsd_bits([1.0, 0.0], [0.75, 0.25]), abs=1e-4)
    assert out.jsd["en"] == pytest.approx(jsd_bits([0.5, 0.5], [0.75, 0.25]), abs=1e-4)
    assert out.mean_jsd == pytest.approx((out.jsd["en"] + out.jsd["zh"]) / 2, abs=1e-4)
    assert out.sees_other == {"en": 100.0, "zh": 100.0}
    # a reader who sees only their own language
    same = language_bias(["zh"], [["zh", "zh"]], docs, k=2)
    assert same.sees_other == {"zh": 0.0} and same.sees_other_all == 0.0
    assert same.jsd["zh"] == pytest.approx(jsd_bits([0.0, 1.0], [0.75, 0.25]), abs=1e-4)


def test_empty_lists_have_no_divergence():
    out = language_bias(["de"], [[]], ["en", "en"], k=10)
    assert out.jsd == {"de": None} and out.mean_jsd is None and out.sees_other == {"de": 0.0}
    with pytest.raises(ValueError, match="2 query languages for 1 lists"):
        language_bias(["de", "en"], [[]], ["en"], k=10)
