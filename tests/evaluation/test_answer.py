"""``samelang eval answer``: the scoring rules on hand-made answers, and a tiny run end to end (a
few paragraphs per shape, a reader trained for three steps, real servers, ``POST /answer``)."""

from __future__ import annotations

import json

import pytest

from samelang.core.metrics.audit import LabelledQuery
from samelang.evaluation import answers as A


def _q(query, lang):
    return LabelledQuery(query, lang, "g", (), f"xquad-{lang}-0-0")


def test_partial_translations_count_only_answers_in_the_readers_language():
    queries = [_q("Wer?", "de"), _q("Who?", "en")]
    golds = {("de", "Wer?"): ["Peyton Manning"], ("en", "Who?"): ["Peyton Manning"]}
    answers = [("Peyton Manning", "en"), ("Peyton Manning", "en")]  # the German reader got an English passage's span
    anywhere = A.score(answers, queries, golds, reader_lang_only=False)
    own = A.score(answers, queries, golds, reader_lang_only=True)
    assert anywhere["f1"] == 100.0 and own["f1"] == 50.0 and own["f1_per_lang"] == {"en": 100.0, "de": 0.0}
    none = A.score([(None, None), ("Manning", "en")], queries, golds, reader_lang_only=True)
    assert none["answered"] == 50.0 and none["em"] == 0.0 and none["f1"] == pytest.approx(100 / 3)
    # where the reader's language has no version, the answer is scored in its own language
    theirs = {"en": ["Peyton Manning"], "de": ["P. Manning"]}
    cross = A.score(answers[:1], queries[:1], golds, reader_lang_only=False, gold_in=lambda i, lang: theirs[lang])
    assert cross["f1"] == 100.0 and cross["f1_per_lang"] == {"de": 100.0}
    # a generated answer detected as a language XQuAD lacks is scored in the question's language
    odd = A.score([("Peyton Manning", "it")], queries[:1], golds, reader_lang_only=False,
                  gold_in=lambda i, lang: theirs.get(lang, golds[("de", "Wer?")]))  # fmt: skip
    assert odd["f1"] == 50.0  # "Peyton Manning" against the German gold "P. Manning"


def test_extractive_is_served_only_when_it_beats_the_generator_on_every_shape():
    row = {"f1": 50.0}
    better, worse = {"f1": 60.0}, {"f1": 40.0}
    assert A.extractive_wins({"parallel: extractive": better, "parallel: generative": row}, ["parallel"])
    assert not A.extractive_wins(
        {
            "parallel: extractive": better,
            "parallel: generative": row,
            "partial: extractive": worse,
            "partial: generative": row,
        },
        ["parallel", "partial"],
    )
    assert not A.extractive_wins({"parallel: extractive": better}, ["parallel"])  # no generator row: not shown


def test_a_tiny_run_answers_over_http_on_each_shape(tiny_reader, samelang_home, tmp_path):
    opts = A.AnswerEvalOptions(reader=str(tiny_reader), tiny=True, per_lang=2, generator=False, out=tmp_path,
                               home=samelang_home)  # fmt: skip
    report = A.run_answer_evaluation(opts, tmp_path / "evaluation.md", log=lambda *_: None)
    data = json.loads((tmp_path / "results.json").read_text())
    rows = data["rows"]
    partial = [n for n in rows if n.startswith("partial: ")]
    assert list(rows)[:3] == ["gold paragraph (reader alone)", "parallel: extractive", "partial: extractive"]
    # partial translations: the questions whose gold the index holds in the reader's language, and the others
    assert partial[1:] in ([], ["partial: extractive, no version in the reader's language"])
    assert sum(rows[n]["n"] for n in partial) == 2 * 12
    for name, r in rows.items():
        assert 0 <= r["f1"] <= 100 and r["em"] <= r["f1"] + 1e-9, name
        if not name.startswith("partial"):
            assert r["n"] == 2 * 12 and len(r["f1_per_lang"]) == 12
    assert rows["parallel: extractive"]["p50_ms"] > 0 and "p50_ms" not in rows["gold paragraph (reader alone)"]
    assert "POST /answer" in report.table and "| partial: extractive |" in report.table


def test_the_dev_split_asks_the_dev_articles_questions_and_writes_no_card(tiny_reader, samelang_home):
    """``--split dev`` chooses a reader as the judge chooses a row: the dev articles' questions (held out of
    every training run, never a test article) over the train split's shapes; the card is the test table's."""
    from samelang.corpora import dev_articles, load_split

    ev = A.AnswerEvaluation(A.AnswerEvalOptions(reader=str(tiny_reader), split="dev", home=samelang_home))
    articles = {int(q.group.split("-")[1]) for q in ev.queries}
    assert ev.judge.split == "train" and articles <= set(dev_articles()) and len(articles) > 1
    assert not articles & set(load_split()["test_articles"])
    assert len(ev.queries) == 24 * 12 and {q.lang for q in ev.queries} == set(A.XQUAD_LANGS)
    test = A.AnswerEvaluation(A.AnswerEvalOptions(reader=str(tiny_reader), home=samelang_home))
    assert {int(q.group.split("-")[1]) for q in test.queries} <= set(load_split()["test_articles"])
    with pytest.raises(ValueError, match="split: --card writes the test articles' table"):
        A.AnswerEvalOptions(split="dev", card=True)
