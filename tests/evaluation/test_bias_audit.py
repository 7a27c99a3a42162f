"""``samelang eval bias``'s statistics: the interval holds the value it is about, and a ranking
that ignores language sits at the floor while one that keeps to the reader's language does not."""

from __future__ import annotations

import numpy as np

from samelang.core.metrics.language_bias import language_bias
from samelang.evaluation.bias_audit import bias_interval, language_blind


def test_interval_and_language_blind_floor():
    rng = np.random.default_rng(1)
    docs = ["en"] * 60 + ["zh"] * 20 + ["de"] * 20
    qlangs = ["zh"] * 20 + ["de"] * 20
    own = [[q] * 10 for q in qlangs]  # every reader sees only their own language
    mixed = [list(rng.choice(docs, size=10, replace=False)) for _ in qlangs]  # language-blind lists
    value = language_bias(qlangs, own, docs, 10).mean_jsd
    (lo, hi), (olo, ohi) = bias_interval(qlangs, own, docs, n=200)
    assert lo <= value <= hi and (olo, ohi) == (0.0, 0.0)
    floor = language_blind(qlangs, own, docs, n=50)
    blind = language_bias(qlangs, mixed, docs, 10).mean_jsd
    assert 0 < floor < 0.05 and abs(blind - floor) < 0.03 and value > 10 * floor
    (lo, hi), _ = bias_interval(qlangs, mixed, docs, n=200)
    assert lo <= blind <= hi
