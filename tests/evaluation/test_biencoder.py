"""The multi-reference evaluation on planted embeddings with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.evaluation.biencoder import Embeddings, evaluate, markdown, markdown_ablation


def planted(shift_tgt: float) -> Embeddings:
    """240 orthogonal-ish paragraphs; queries equal their gold paragraph; the zh
    version of every paragraph is pushed ``shift_tgt`` towards a common direction."""
    rng = np.random.default_rng(0)
    base = rng.normal(size=(240, 384))
    common = rng.normal(size=384)

    def unit(x):
        return x / np.linalg.norm(x, axis=-1, keepdims=True)

    gold = rng.integers(0, 240, size=50)
    P = {"en": unit(base), "zh": unit(base + shift_tgt * common)}
    Q = {"en": unit(base[gold]), "zh": unit(base[gold])}
    return Embeddings(P, Q, gold)


def test_perfect_alignment_scores_perfectly():
    r = evaluate(planted(0.0))
    for key in ("en+zh|en", "en+zh|zh"):
        assert r["multi"][key] == {"comp_at_10": 100.0, "max_r": 2.0, "max_r_norm": 100.0}
    assert r["mono_same_ndcg10_avg"] == pytest.approx(100.0)
    assert r["largest_gap"] == {"pair": "zh", "gap": 0.0}
    assert "en+zh|zh" in markdown({"base": r, "aligned": r})


def test_misalignment_is_found_late_and_gets_worse_with_it():
    # zh paragraphs collapse towards one point, away from their queries: both versions need deeper rankings
    mild, strong = evaluate(planted(10.0)), evaluate(planted(30.0))
    m1, m2 = mild["multi"]["en+zh|en"], strong["multi"]["en+zh|en"]
    assert 2 < m1["max_r"] < m2["max_r"] and m2["max_r"] > 40
    assert 100 > m1["comp_at_10"] > m2["comp_at_10"] and m2["max_r_norm"] < 60
    assert strong["worst_setting"]["max_r_norm"] <= m2["max_r_norm"]


def test_ablation_table_has_one_row_per_setting_with_its_budget():
    good, bad = evaluate(planted(0.0)), evaluate(planted(30.0))
    runs = {"jsd+nce": {"steps": 178, "batch_size": 16, "train_seconds": 1800.0}}
    table = markdown_ablation({"base": bad, "jsd+nce": good}, runs).splitlines()
    assert len(table) == 4
    assert table[2].startswith("| base |") and "| - | - |" in table[2]
    row = table[3]
    assert row.startswith("| L_JSD + L_NCE (ours) | 100.00 | 2.00 | 100.00 |") and "| 178 x 16 | 30.0 |" in row
