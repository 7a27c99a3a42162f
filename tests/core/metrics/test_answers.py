"""Answer F1 and exact match (MLQA's normalisation): hand-made cases with known answers."""

from __future__ import annotations

import pytest

from samelang.core.metrics.answers import answer_f1, exact_match, normalise, tokens


def test_normalise_deletes_case_punctuation_and_the_languages_articles():
    assert normalise("The  Denver Broncos!", "en") == "denver broncos"
    assert normalise("MPEG-4", "en") == "mpeg4"  # punctuation is deleted, not a space (MLQA)
    assert normalise("Los Broncos de Denver.", "es") == "broncos de denver"
    assert normalise("Die Broncos", "de") == "broncos"
    assert normalise("The Broncos", "de") == "the broncos"  # English articles are English only
    assert normalise("الكتاب الكبير", "ar") == "كتاب كبير"  # MLQA drops every ال


def test_chinese_and_thai_count_characters_and_keep_latin_runs_whole():
    assert tokens("MPEG-4 格式。", "zh") == ["mpeg4", "格", "式"]
    assert tokens("ในปี 1990", "th") == ["ใ", "น", "ป", "ี", "1990"]
    assert answer_f1("4 分 51 秒", ["4分51秒"], "zh") == 100.0  # spacing does not matter in Chinese


@pytest.mark.parametrize(
    ("prediction", "gold", "f1"),
    [
        ("MPEG-2", "MPEG-4", 0.0),  # mpeg2 vs mpeg4: no common token
        ("the Denver Broncos team", "Denver Broncos", 80.0),  # P = 2/3, R = 1
        ("Broncos", "Denver Broncos", 200 / 3),  # P = 1, R = 1/2
        ("Carolina", "Denver Broncos", 0.0),
        ("the", "a", 0.0),  # both empty once normalised: no common token (MLQA)
    ],
)
def test_token_f1_is_squads(prediction, gold, f1):
    assert answer_f1(prediction, [gold], "en") == pytest.approx(f1)


def test_the_best_gold_counts_and_no_prediction_scores_zero():
    assert answer_f1("Denver", ["Carolina", "Denver"], "en") == 100.0
    assert exact_match("the Denver Broncos.", ["Denver Broncos"], "en") == 100.0
    assert exact_match("Broncos", ["Denver Broncos"], "en") == 0.0
    assert answer_f1(None, ["Denver"], "en") == exact_match(None, ["Denver"], "en") == 0.0
    assert answer_f1("", ["Denver"], "en") == 0.0
