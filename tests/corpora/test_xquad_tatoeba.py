"""The vendored corpora: counts, parallel alignment, split, BOM handling, JSONL errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from samelang.corpora import (
    XQUAD_LANGS,
    CorpusFormatError,
    dev_articles,
    dev_reading,
    load_documents_jsonl,
    load_labelled_queries_jsonl,
    load_split,
    load_tatoeba,
    load_xquad,
)
from samelang.corpora.xquad import BOM, _raw


@pytest.mark.parametrize("lang", XQUAD_LANGS)
def test_every_language_counts_and_split(lang):
    full = load_xquad([lang])
    assert len(full.paragraphs) == 240 and len(full.questions) == 1190
    train, test = load_xquad([lang], split="train"), load_xquad([lang], split="test")
    assert (len(train.paragraphs), len(train.questions)) == (160, 816)
    assert (len(test.paragraphs), len(test.questions)) == (80, 374)
    split = load_split()
    assert {p.article for p in test.paragraphs} == set(split["test_articles"])
    assert {p.article for p in train.paragraphs} == set(split["train_articles"])
    assert all(a % 3 == 2 for a in split["test_articles"]) and all(a % 3 != 2 for a in split["train_articles"])
    assert len({q.uid for q in full.questions}) == 1190


def test_parallel_alignment():
    en = load_xquad(["en"])
    for lang in XQUAD_LANGS[1:]:
        other = load_xquad([lang])
        assert [p.group for p in other.paragraphs] == [p.group for p in en.paragraphs]
        assert [(q.id, q.group) for q in other.questions] == [(q.id, q.group) for q in en.questions]
    groups = Counter(p.group for p in load_xquad().paragraphs)
    assert len(groups) == 240 and set(groups.values()) == {12}


@pytest.mark.parametrize("lang", XQUAD_LANGS)
def test_bom_is_stripped_and_answer_offsets_shift_with_it(lang):
    raw_bom = {
        f"xquad-{a}-{i}"
        for a, art in enumerate(_raw(lang)["data"])
        for i, par in enumerate(art["paragraphs"])
        if par["context"].startswith(BOM)
    }
    if lang in ("en", "ro"):
        assert not raw_bom
    else:
        assert 2 <= len(raw_bom) <= 9
    x = load_xquad([lang])
    text = {p.group: p.text for p in x.paragraphs}
    assert not any(t.startswith(BOM) for t in text.values())
    checked = 0
    for q in x.questions:
        for a in q.answers:
            assert text[q.group][a.start : a.start + len(a.text)] == a.text, (lang, q.id)
            checked += q.group in raw_bom
    assert checked > 0 or not raw_bom


def test_dev_reading_is_the_dev_articles_questions_with_fixed_distractors():
    """One list for every reader check on dev: only the dev articles (never a test one), the first
    ``per_lang`` per language, the gold paragraph holding an answer, distractors of the same article holding
    none, and the same sample on every call (the trainer's threshold and the precision check agree)."""
    dev = dev_articles()
    rows = dev_reading(("en", "zh"), dev, per_lang=7, distractors=2)
    assert Counter(q.lang for q, _, _ in rows) == {"en": 7, "zh": 7}
    test = set(load_split()["test_articles"])
    paragraphs = {(p.lang, p.article): set() for p in load_xquad(["en", "zh"], split="train").paragraphs}
    for p in load_xquad(["en", "zh"], split="train").paragraphs:
        paragraphs[(p.lang, p.article)].add(p.text)
    for q, gold, others in rows:
        assert q.article in dev and q.article not in test
        assert any(a.text in gold for a in q.answers)
        assert len(others) <= 2 and gold not in others
        assert all(o in paragraphs[(q.lang, q.article)] for o in others)
        assert not any(a.text in o for a in q.answers for o in others)
    assert sum(len(o) == 2 for *_, o in rows) >= 10  # fewer only where the article has no other paragraph left
    assert rows == dev_reading(("en", "zh"), dev, per_lang=7, distractors=2)
    assert rows != dev_reading(("en", "zh"), dev, per_lang=7, distractors=2, seed=1)


def test_tatoeba_pairs():
    pairs = load_tatoeba()
    per_lang = Counter(p.lang for p in pairs)
    assert len(per_lang) == 11 and per_lang["th"] == 548
    assert all(n == 1000 for lang, n in per_lang.items() if lang != "th")
    assert all(p.en and p.tgt for p in pairs)
    with pytest.raises(ValueError, match="no Tatoeba pairs"):
        load_tatoeba(["xx"])


def test_unknown_language_is_rejected():
    with pytest.raises(ValueError, match="unknown XQuAD language"):
        load_xquad(["en", "jp"])
    with pytest.raises(ValueError, match="split must be one of"):
        load_xquad(split="dev")


def test_documents_jsonl(tmp_path):
    f = tmp_path / "docs.jsonl"
    f.write_text(
        json.dumps({"id": 1, "text": "Bonjour", "lang": "FR", "group": "g1", "url": "u"})
        + "\n\n"
        + json.dumps({"id": "b", "text": "Hello"}, ensure_ascii=False)
        + "\n"
    )
    docs = load_documents_jsonl(f)
    assert [(d.id, d.lang, d.group, d.metadata) for d in docs] == [
        ("1", "fr", "g1", {"url": "u"}),
        ("b", None, None, {}),
    ]


@pytest.mark.parametrize(
    "line, field",
    [
        ('{"text": "x"}', "id"),
        ('{"id": "a", "text": ""}', "text"),
        ('{"id": "a", "text": "x", "lang": 3}', "lang"),
        ('{"id": "a", "text": "x", "group": [1]}', "group"),
        ("[1, 2]", "<line>"),
        ('{"id": "a", "text": ', "<line>"),
    ],
)
def test_documents_jsonl_errors_name_file_line_field(tmp_path, line, field):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": "ok", "text": "fine"}\n' + line + "\n")
    with pytest.raises(CorpusFormatError) as e:
        load_documents_jsonl(f)
    assert (e.value.line, e.value.field) == (2, field)
    assert str(f) in str(e.value) and f"'{field}'" in str(e.value)


def test_documents_jsonl_duplicate_and_non_utf8(tmp_path):
    f = tmp_path / "dup.jsonl"
    f.write_text('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n')
    with pytest.raises(CorpusFormatError, match="duplicate id"):
        load_documents_jsonl(f)
    g = tmp_path / "latin1.jsonl"
    g.write_bytes(b'{"id": "a", "text": "caf\xe9"}\n')
    with pytest.raises(CorpusFormatError, match="not UTF-8"):
        load_documents_jsonl(g)


def test_labelled_queries_jsonl(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"query": " where? ", "lang": "zh", "relevant": ["a", 2]}\n{"query": "x", "relevant": []}\n')
    with pytest.raises(CorpusFormatError) as e:
        load_labelled_queries_jsonl(f)
    assert (e.value.line, e.value.field) == (2, "relevant")
    f.write_text('{"query": " where? ", "lang": "zh", "relevant": ["a", 2]}\n')
    (q,) = load_labelled_queries_jsonl(f)
    assert (q.query, q.lang, q.relevant) == ("where?", "zh", ("a", "2"))


@pytest.mark.parametrize(
    "line, field, words",
    [
        ('{"id": "a", "text": "\\u200b\\u200c"}', "text", "visible characters"),
        ('{"id": "a", "text": "ok \\ud800"}', "text", "lone UTF-16 surrogate"),
        ('{"id": "\\u2060", "text": "ok"}', "id", "visible characters"),
    ],
)
def test_jsonl_refuses_text_a_model_cannot_use(tmp_path, line, field, words):
    from samelang.corpora.jsonl import CorpusFormatError, load_documents_jsonl

    f = tmp_path / "c.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(CorpusFormatError, match=words) as e:
        load_documents_jsonl(f)
    assert e.value.field == field and e.value.line == 1
