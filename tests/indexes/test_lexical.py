"""The lexical half of hybrid retrieval: BM25 over real XQuAD paragraphs and its life inside the
index's generations (build, add, reopen, analyzer checks).

The analyzer is the real encoder's (the service's choice); the formulas are checked against
hand computation (Okapi BM25 as Lucene scores it); its fusion with the cosine is
tests/service/test_candidates.py's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from samelang.corpora import Document, load_xquad
from samelang.indexes.generations import AnalyzerMismatch, read_index_manifest
from samelang.indexes.index import open_index
from samelang.indexes.lexical import K1, B, LexicalIndex
from samelang.indexes.writes import add_documents, build_index
from samelang.retrieval.candidates import best_rows


def words(text: str) -> list[str]:
    return text.lower().split()


def test_bm25_matches_the_okapi_formula():
    texts = ["the cat sat", "the dog sat on the mat", "a cat and a cat"]
    lex = LexicalIndex.build(texts, words, "words")
    n, avgdl = 3, np.mean([len(words(t)) for t in texts])

    def okapi(term, doc):
        tf = words(doc).count(term)
        df = sum(term in words(t) for t in texts)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        # Lucene's form: Robertson's without the (k1 + 1) numerator, a constant that changes no ranking
        return idf * tf / (tf + K1 * (1 - B + B * len(words(doc)) / avgdl)) if tf else 0.0

    expected = [okapi("cat", d) + okapi("mat", d) for d in texts]
    assert lex.scores(["cat", "mat"]) == pytest.approx(expected, rel=1e-5)
    assert lex.scores(["unseen"]).tolist() == [0, 0, 0]  # no shared term: nothing, not an error
    s = lex.scores(["cat"])
    rows = best_rows(s, 5)
    assert rows.tolist() == [2, 0] and s[rows[0]] > s[rows[1]] > 0  # only documents that share a term
    assert best_rows(np.where([True, True, False], s, 0.0), 5).tolist() == [0]


@pytest.fixture(scope="module")
def paragraphs():
    return [d for lang in ("en", "th", "zh") for d in load_xquad([lang], split="test").documents()[:20]]


def test_the_encoders_subword_analyzer_segments_every_script(encoder):
    name, analyze = encoder.analyzer
    assert name.startswith("subword-lower:") and encoder.analyzer[0] == name  # one name per tokenizer
    for text in ("Die Hauptstadt", "ประเทศไทยมีประชากร", "北京是中国的首都"):
        terms = analyze(text)
        assert len(terms) >= 2 and all(t and t == t.lower() and "\u2581" not in t for t in terms)
    long = " ".join(["word"] * 2000)
    assert len(analyze(long)) == 2000  # never truncated at the model's 512 tokens
    # it is the model's tokenizer (the checkpoint's own tokenizer.json, untruncated), lower-cased
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(encoder.path / "tokenizer.json"))
    reference.no_truncation()
    for text in [d.text for d in load_xquad(["ar", "hi", "ru", "th", "zh"], split="test").documents()[:60]]:
        want = [
            w
            for w in (t.lstrip("\u2581").lower() for t in reference.encode(text, add_special_tokens=False).tokens)
            if w
        ]
        assert analyze(text) == want


def test_a_question_finds_its_own_paragraph_in_its_own_language(encoder, paragraphs):
    _, analyze = encoder.analyzer
    lex = LexicalIndex.build([d.text for d in paragraphs], analyze, "x")
    for lang in ("en", "th", "zh"):
        qs = [q for q in load_xquad([lang], split="test").questions if q.group in {d.group for d in paragraphs}]
        hits = 0
        for q in qs:
            rows = best_rows(lex.scores(analyze(q.text)), 1)
            hits += len(rows) == 1 and (paragraphs[int(rows[0])].group, paragraphs[int(rows[0])].lang) == (
                q.group,
                lang,
            )
        assert hits / len(qs) >= 0.6, (lang, hits, len(qs))  # BM25 alone is a strong same-language matcher


def test_the_index_keeps_its_lexical_half_through_add_and_reopen(tmp_path, encoder, paragraphs):
    analyzer = encoder.analyzer
    out = tmp_path / "hybrid"
    m = build_index(out, paragraphs[:40], encoder.encode_passages, encoder.info, analyzer=analyzer)
    assert m["lexical"] == {"analyzer": analyzer[0], "scoring": "bm25 (lucene)", "k1": K1, "b": B}
    idx = open_index(out, encoder.info)
    assert idx.lexical is not None and idx.lexical.n_docs == 40
    new = paragraphs[40:]
    probe = analyzer[1](new[3].text)
    assert idx.lexical.scores(probe).shape == (40,)
    with pytest.raises(AnalyzerMismatch, match="analysed by"):
        add_documents(out, new, encoder.encode_passages, encoder.info)
    assert read_index_manifest(out)["generation"] == 1  # refused before anything was written
    add_documents(out, new, encoder.encode_passages, encoder.info, analyzer=analyzer)
    again = open_index(out, encoder.info)
    scores = again.lexical.scores(probe)
    assert scores.shape == (60,) and int(np.argmax(scores)) == 43  # the new paragraph is found by its words
    # document frequencies were recomputed over all 60 texts: the same as building them at once
    fresh = LexicalIndex.build([d.text for d in paragraphs], analyzer[1], analyzer[0])
    assert scores == pytest.approx(fresh.scores(probe), rel=1e-5)
    idx.close()
    again.close()


def test_an_index_without_a_lexical_half_still_opens(tmp_path, encoder, paragraphs):
    out = tmp_path / "dense"
    build_index(out, paragraphs[:5], encoder.encode_passages, encoder.info)
    assert "lexical" not in read_index_manifest(out)
    assert open_index(out, encoder.info).lexical is None
    add_documents(out, [Document("extra", "an extra paragraph", "en")], encoder.encode_passages, encoder.info,
                  analyzer=encoder.analyzer)  # fmt: skip
    assert "lexical" not in read_index_manifest(out)  # a dense index stays dense
