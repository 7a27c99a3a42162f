"""Language identification on every XQuAD language's real questions."""

from __future__ import annotations

import pytest

from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.primitives.langid import get_identifier


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


@pytest.mark.parametrize("lang", ["zh", "ar", "el", "hi", "th", "en"])
def test_script_shares_counted_by_regex_are_the_letter_by_letter_shares(lang):
    """The script check counts with regular expressions (a paragraph in microseconds); on real
    paragraphs it decides exactly what counting letter by letter with ``str.isalpha`` decides."""
    from samelang.primitives.langid import _SCRIPT_RANGES, DEFAULT_DETECT_LANGS, _script_language

    def by_letter(text):
        letters = [ord(c) for c in text if c.isalpha()]
        for code, ranges in _SCRIPT_RANGES:
            n = sum(any(lo <= cp <= hi for lo, hi in ranges) for cp in letters)
            if code == "ja" and n > 0:
                return "ja"
            if letters and n / len(letters) >= 0.5:
                return code
        return None

    for doc in load_xquad([lang], split="test").documents()[:40]:
        got = _script_language(doc.text, DEFAULT_DETECT_LANGS)
        assert (got[0] if got else None) == by_letter(doc.text)
        assert (got[0] if got else None) == (lang if lang != "en" else None)


def test_only_letters_decide_the_script():
    """Marks that live in a script's code block but are not letters ("・" in the kana block, Arabic
    punctuation, Devanagari's danda) do not make a text that language; confidence stays <= 1."""
    from samelang.primitives.langid import DEFAULT_DETECT_LANGS, _script_language

    zh = _script_language("伦敦・巴黎是两个城市", DEFAULT_DETECT_LANGS)
    assert zh is not None and zh[0] == "zh"
    hi = _script_language("भारत की राजधानी नई दिल्ली है।", DEFAULT_DETECT_LANGS)
    assert hi is not None and hi[0] == "hi" and hi[1] <= 1.0
    assert _script_language("Paris, London ، ؟", DEFAULT_DETECT_LANGS) is None
