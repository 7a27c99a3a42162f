"""Language identification on every XQuAD language's real questions."""

from __future__ import annotations

import pytest

from indexes.corpora import XQUAD_LANGS, load_xquad
from indexes.langid import get_identifier


@pytest.mark.parametrize("lang", XQUAD_LANGS)
def test_xquad_test_questions(lang):
    qs = [q.text for q in load_xquad([lang], split="test").questions[:100]]
    ident = get_identifier()
    single = [d.lang if d else None for d in (ident.detect(q) for q in qs)]
    batch = [d.lang if d else None for d in ident.detect_many(qs)]
    assert single == batch
    accuracy = sum(x == lang for x in single) / len(qs)
    assert accuracy >= 0.9, (lang, accuracy)


def test_mixed_script_and_empty():
    ident = get_identifier()
    assert ident.detect("V＆A起源于哪个博览会？").lang == "zh"
    assert ident.detect("東京タワーはどこですか").lang == "ja"
    assert ident.detect("12345 !!") is None or ident.detect("12345 !!").confidence < 0.5
