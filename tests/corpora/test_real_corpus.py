"""The real corpus store: what the training views hold, and that XQuAD and MLQA stay out of it.

These need the store (``samelang data import --snapshots DIR`` then ``samelang data filter``): without it
they skip and say so. The declarations' own checks (provenance, licences, no test set declared) run
everywhere, in test_sources.py.
"""

from __future__ import annotations

import random

import pytest

from samelang.corpora.sources import SOURCES
from samelang.corpora.store import CorpusStore, default_store
from samelang.corpora.views import load_views, read_contamination, title_key, xquad_titles
from samelang.corpora.xquad import XQUAD_LANGS


@pytest.fixture(scope="module")
def store(samelang_home) -> CorpusStore:
    s = CorpusStore(default_store(samelang_home))
    missing = [x.name for x in SOURCES if not s.has(x)]
    if missing or not (s.root / "contamination.json").is_file():
        pytest.skip(f"the corpus store {s.root} lacks {missing or 'contamination.json'}: samelang data import / filter")
    return s


@pytest.fixture(scope="module")
def views(store):
    v = load_views(store)
    print(f"\nloading every view: {v.seconds:.1f} s")
    return v


def test_the_views_hold_enough_to_learn_from(views):
    per_lang = {}
    for r in views.qa:
        per_lang[r.lang] = per_lang.get(r.lang, 0) + 1
    assert sum(per_lang.values()) >= 20_000 and len([n for n in per_lang.values() if n >= 500]) >= 5, per_lang
    assert len(views.parallel) >= 400 and all(all(p.sentences[lang][0] for lang in XQUAD_LANGS) for p in views.parallel)
    assert {r.split for r in views.qa} == {"train", "dev"}
    docs = {}
    for r in views.qa:
        docs.setdefault((r.source, r.doc), set()).add(r.split)
    assert all(len(parts) == 1 for parts in docs.values())  # a document is in one part only


def test_no_passage_comes_from_an_xquad_article(views):
    titles = xquad_titles()
    assert not [p.id for p in views.passages.values() if p.title and title_key(p.title) in titles]


def kept_passages_over_the_threshold(store, views, home, langs) -> float:
    """Every passage the filter flagged is out; a sample of kept ones, embedded again, is compared with the
    XQuAD paragraphs in ``langs``: returns the highest cosine (the filter's threshold is cross-language)."""
    from samelang.core.catalogue import resolve_model
    from samelang.core.models.encoder import Encoder  # deferred: the model only for these tests
    from samelang.corpora import load_xquad

    c = read_contamination(store)
    cal = c["calibration"]
    assert cal["caught_pct"] == 100.0 and cal["threshold"] <= cal["start"]
    kept = set(views.passages) | {p.id for p in views.parallel}
    assert not kept & set(c["dropped"])
    enc = Encoder(resolve_model(c["model"], home), home=home)
    assert enc.fingerprint == c["fingerprint"]
    X = enc.encode_passages([p.text for p in load_xquad(list(langs)).paragraphs])
    sample = random.Random(0).sample(sorted(p.text for p in views.passages.values()), 48)
    sample += [p.text(lang) for p in random.Random(1).sample(views.parallel, 4) for lang in XQUAD_LANGS]
    best = float((enc.encode_passages(sample) @ X.T).max())
    assert best < cal["threshold"], best
    return best


def test_no_kept_passage_is_over_the_calibrated_threshold_against_english(store, views, samelang_home):
    """The kept sample against the English XQuAD paragraphs (the threshold is calibrated on cross-language
    pairs, so a translation of one of them is near its English version too); all 12 languages: the slow twin."""
    kept_passages_over_the_threshold(store, views, samelang_home, ["en"])


@pytest.mark.slow
def test_no_kept_passage_is_over_the_calibrated_threshold(store, views, samelang_home):
    """The kept sample against the XQuAD paragraphs of all 12 languages (2,880 passages embedded)."""
    kept_passages_over_the_threshold(store, views, samelang_home, XQUAD_LANGS)


def test_only_declared_sources_are_read_and_no_xquad_paragraph_is_in_them(views):
    """No MLQA and no copy of XQuAD: every row comes from a declared source (none of which is a test set,
    test_sources.py), and no kept passage is, to the character, an XQuAD paragraph in any language."""
    from samelang.corpora import load_xquad

    assert {r.source for r in views.qa} <= {s.name for s in SOURCES}
    xquad = {p.text.strip() for p in load_xquad().paragraphs}
    kept = {p.text.strip() for p in views.passages.values()}
    kept |= {p.text(lang).strip() for p in views.parallel for lang in XQUAD_LANGS}
    assert not kept & xquad


def test_data_info_prints_the_table(store, monkeypatch):
    from typer.testing import CliRunner

    from samelang.cli import app

    monkeypatch.setenv("SAMELANG_CORPORA", str(store.root))
    out = CliRunner().invoke(app, ["data", "info"])
    assert out.exit_code == 0, out.output
    assert "| tydiqa_goldp | ru |" in out.output and "| flores200 | CC-BY-SA-4.0 |" in out.output
    assert "loading every view:" in out.output and "missing sources: none" in out.output
