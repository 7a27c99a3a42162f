"""Translation groups inferred without labels (what the fused retriever lists as one hit)."""

from __future__ import annotations

import numpy as np

from samelang.retrieval.translations import infer_translation_groups


def _unit(*rows):
    x = np.asarray(rows, dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_a_translation_joins_the_first_earlier_hit_it_matches():
    # hits 0 (en) and 1 (de) are one text; 2 (en) is another; 3 (de) matches 0 but 0's group has de already,
    # and matches 2, whose group has no de yet
    cross = _unit([1, 0, 0], [0.99, 0.1, 0], [0.7, 0.7, 0], [0.8, 0.6, 0])
    of, heads = infer_translation_groups(cross, ["en", "de", "en", "de"], threshold=0.8)
    assert of == [0, 0, 1, 1] and heads == [0, 2]


def test_a_hit_of_unknown_language_or_below_the_threshold_stays_alone():
    cross = _unit([1, 0], [1, 0.01], [0, 1])
    of, heads = infer_translation_groups(cross, ["en", None, "de"], threshold=0.8)
    assert of == [0, 1, 2] and heads == [0, 1, 2]
