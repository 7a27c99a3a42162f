"""Group-aware candidates over a real 12-language FAISS index (two held-out XQuAD articles, every
paragraph in all 12 languages), the real base model, and a real HTTP server."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest

from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.corpora.records import Document
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives.langid import get_identifier
from tests.service.conftest import make_app, running

ARTICLES = {2, 5}  # two test articles (SPLIT.json: article % 3 == 2)


def _docs(grouped: bool = True) -> list[Document]:
    docs = [d for d in load_xquad(XQUAD_LANGS, split="test").documents() if d.metadata["article"] in ARTICLES]
    return docs if grouped else [Document(d.id, d.text, d.lang, None, d.metadata) for d in docs]


@pytest.fixture(scope="module")
def index12(tmp_path_factory, encoder):
    out = tmp_path_factory.mktemp("idx12") / "xquad-12"
    build_index(out, _docs(), encoder.encode_passages, encoder.info, source="xquad:12:2 test articles",
                analyzer=encoder.analyzer)  # fmt: skip
    return open_index(out, encoder.info)


@pytest.fixture(scope="module")
def pipe12(encoder, index12):
    from samelang.core.models.cross_encoder import CosineReranker
    from samelang.core.models.generation import NoGenerator
    from samelang.retrieval.limits import Limits
    from samelang.retrieval.options import Defaults
    from samelang.retrieval.pipeline import Pipeline

    limits = Limits(max_rerank_documents=20, max_document_chars=5000)
    return Pipeline(encoder, index12, CosineReranker(encoder), NoGenerator(), get_identifier(), limits,
                    defaults=Defaults(rerank=False, rerank_k=20, group_candidates=True))  # fmt: skip


@pytest.fixture(scope="module")
def client12(service_settings, pipe12):
    with running(make_app(service_settings, pipe12)) as url, httpx.Client(base_url=url, timeout=120) as c:
        yield c


def _question(lang: str):
    return next(q for q in load_xquad([lang], split="test").questions if q.article in ARTICLES)


@pytest.mark.parametrize("rerank", [False, True])
def test_one_version_per_group_in_the_readers_language_first(client12, rerank):
    q = _question("zh")
    body = client12.post("/search", json={"query": q.text, "k": 8, "rerank": rerank}).json()
    assert body["components"]["candidates"] == "groups"
    assert body["components"]["reranker"] == ("bi-encoder-cosine" if rerank else None)
    hits = body["hits"]
    groups = [h["group"] for h in hits]
    assert len(hits) == 8 and len(set(groups)) == 8  # one slot per parallel group
    assert hits[0]["group"] == q.group and hits[0]["lang"] == "zh"  # the gold, in the reader's language
    assert all(h["lang"] == "zh" for h in hits)  # every group has a zh version in this index
    for h in hits:  # the other 11 versions are listed, each once, none of them the hit itself
        langs = [v["lang"] for v in h["versions"]]
        assert sorted(langs) == sorted(x for x in XQUAD_LANGS if x != "zh")
        assert all(v["id"].endswith(h["group"][len("xquad") :]) for v in h["versions"])


def test_language_preference_list_and_any(client12):
    q = _question("ar")
    body = client12.post("/search", json={"query": q.text, "k": 5, "language_preference": ["de", "en"]}).json()
    assert [h["lang"] for h in body["hits"]] == ["de"] * 5
    assert body["hits"][0]["group"] == q.group
    assert body["hits"][0]["versions"][0]["lang"] == "en"  # then the next preferred language
    # 'any': each group is shown as the version the retriever ranked first: the plain top document
    anyv = client12.post("/search", json={"query": q.text, "k": 3, "language_preference": "any"}).json()
    plain = client12.post("/search", json={"query": q.text, "k": 1, "group_candidates": False}).json()
    assert plain["components"]["candidates"] == "documents" and plain["hits"][0]["versions"] == []
    assert anyv["hits"][0]["id"] == plain["hits"][0]["id"]
    assert anyv["hits"][0]["score"] == pytest.approx(plain["hits"][0]["score"])
    # a preferred language that a filter excludes is skipped; versions stay inside the filter
    body = client12.post("/search", json={"query": q.text, "k": 3, "langs": ["en", "ar"],
                                          "language_preference": ["de", "en"]}).json()  # fmt: skip
    assert [h["lang"] for h in body["hits"]] == ["en"] * 3
    assert all([v["lang"] for v in h["versions"]] == ["ar"] for h in body["hits"])


def test_a_corpus_without_groups_behaves_as_before(tmp_path, encoder, pipe12):
    from samelang.retrieval.options import SearchOptions

    out = tmp_path / "nogroups"
    build_index(out, _docs(grouped=False), encoder.encode_passages, encoder.info)
    plain = pipe12.replace(index=open_index(out, encoder.info))
    for lang in ("en", "th"):
        q = _question(lang)
        for rerank in (False, True):
            a = plain.search(q.text, SearchOptions(k=15, rerank=rerank, group_candidates=True))
            b = plain.search(q.text, SearchOptions(k=15, rerank=rerank, group_candidates=False))
            assert [h.doc.id for h in a.hits] == [h.doc.id for h in b.hits]
            assert [h.score for h in a.hits] == pytest.approx([h.score for h in b.hits])
            assert all(h.versions == [] for h in a.hits)


def test_answer_cites_distinct_groups_in_the_readers_language(client12):
    q = _question("hi")
    body = client12.post("/answer", json={"query": q.text, "passages": 3}).json()
    assert [p["lang"] for p in body["passages"]] == ["hi"] * 3
    assert body["passages"][0]["group"] == q.group
    assert len({p["group"] for p in body["passages"]}) == 3
    assert len(body["passages"][0]["versions"]) == 11
    assert body["components"] == {"retriever": "multilingual-e5-small", "reranker": None, "candidates": "groups",
                                  "lexical_weight": None}  # fmt: skip


@pytest.mark.parametrize(
    "pref",
    ["klingon", "READER", [], ["xx"], ["de", "de"], 5, ["de"] * 21],
)
def test_bad_language_preference_is_a_422_naming_the_field(client12, pref):
    for route in ("/search", "/answer"):
        r = client12.post(route, json={"query": "Where is it?", "language_preference": pref})
        assert r.status_code == 422, (route, pref, r.text)
        assert r.json()["error"] == "invalid_request" and "language_preference" in r.json()["detail"]


def test_info_names_the_served_components(client12):
    info = client12.get("/info").json()
    measured = info["defaults"].pop("measured")
    # the base model is not the retriever models/serving.json was measured on: neutral defaults, said so
    assert list(info["defaults"].pop("not_measured_on")) == ["model"]
    assert info["defaults"] == {"retriever": "multilingual-e5-small", "lexical_weight": None, "reranker": None,
                                "rerank_k": None, "rerank_fusion": None, "candidates": "groups", "reader": None,
                                "reranks_by_default": False}  # fmt: skip
    # what models/serving.json says of the shipped default, whatever this app serves
    served = json.loads((Path(__file__).resolve().parents[2] / "models" / "serving.json").read_text())
    assert measured["chosen"] == served["chosen"] and measured["test"] == served["test"][served["chosen"]]
    assert measured["good_at"] and "bad_at" in measured


# -- hybrid retrieval (dense + BM25) -------------------------------------------------------------
def _exact_fused(encoder, index, query: str, weight: float):
    """The hybrid score of every document, computed apart from the pipeline: the query's cosine with
    each stored vector plus ``weight`` x its BM25 over the query's best BM25."""
    from samelang.indexes.vectors import normalise
    from samelang.retrieval.candidates import fuse

    q = normalise(encoder.encode_queries([query]))[0]
    cos = index.vectors(list(range(index.size))) @ q
    bm25 = index.lexical.scores(encoder.analyzer[1](query))
    return fuse(cos, bm25, weight)[0]


@pytest.mark.parametrize("lang", ["en", "th"])
def test_hybrid_search_ranks_by_the_fused_score(client12, encoder, index12, lang):
    q = _question(lang)
    body = client12.post("/search", json={"query": q.text, "k": 10, "group_candidates": False,
                                          "lexical_weight": 0.08}).json()  # fmt: skip
    assert body["components"]["lexical_weight"] == 0.08 and body["components"]["candidates"] == "documents"
    fused = _exact_fused(encoder, index12, q.text, 0.08)
    expected = np.argsort(-fused, kind="stable")[:10]
    rows = index12.docs.rows_for_ids([h["id"] for h in body["hits"]])
    assert [rows[h["id"]] for h in body["hits"]] == expected.tolist()
    assert [h["score"] for h in body["hits"]] == pytest.approx(fused[expected].tolist(), abs=1e-5)
    top = body["hits"][0]
    assert (top["group"], top["lang"]) == (q.group, lang)  # the gold paragraph, in the reader's language
    grouped = client12.post("/search", json={"query": q.text, "k": 5, "lexical_weight": 0.08}).json()
    assert grouped["hits"][0]["id"] == top["id"] and grouped["components"]["candidates"] == "groups"


def test_weight_zero_is_the_dense_retriever(client12):
    q = _question("de")
    dense = client12.post("/search", json={"query": q.text, "k": 6}).json()
    zero = client12.post("/search", json={"query": q.text, "k": 6, "lexical_weight": 0}).json()
    assert dense["components"]["lexical_weight"] is None and zero["components"]["lexical_weight"] is None
    assert [h["id"] for h in zero["hits"]] == [h["id"] for h in dense["hits"]]
    assert [h["score"] for h in zero["hits"]] == pytest.approx([h["score"] for h in dense["hits"]])


@pytest.mark.parametrize("weight", [-0.1, 10.5, "much", True])
def test_a_bad_lexical_weight_is_a_422_naming_the_field(client12, weight):
    for route in ("/search", "/answer"):
        r = client12.post(route, json={"query": "Where is it?", "lexical_weight": weight})
        assert r.status_code == 422, (route, weight, r.text)
        assert "lexical_weight" in r.json()["detail"]


def test_hybrid_over_an_index_without_its_lexical_half_names_the_fix(tmp_path, encoder, pipe12):
    from samelang.retrieval.errors import BadRequest
    from samelang.retrieval.options import SearchOptions

    out = tmp_path / "dense-only"
    build_index(out, _docs()[:24], encoder.encode_passages, encoder.info)
    dense = pipe12.replace(index=open_index(out, encoder.info))
    assert dense.lexical is None and dense.components()["lexical_weight"] is None
    with pytest.raises(BadRequest) as e:
        dense.search("Where is it?", SearchOptions(lexical_weight=0.08))
    assert e.value.field == "lexical_weight" and "samelang index build" in str(e.value)
    assert dense.search("Where is it?", SearchOptions(k=3)).hits  # dense requests are served as before


def test_a_hybrid_default_over_an_index_without_its_lexical_half_serves_dense(tmp_path, encoder, pipe12):
    """An index built before its lexical half existed keeps working under a hybrid default (dense,
    said in the components); only a request that asks for hybrid explicitly is refused."""
    from dataclasses import replace

    from samelang.retrieval.options import SearchOptions

    out = tmp_path / "old"
    build_index(out, _docs()[:24], encoder.encode_passages, encoder.info)
    old = pipe12.replace(index=open_index(out, encoder.info), defaults=replace(pipe12.defaults, lexical_weight=0.08))
    r = old.search("Where is it?", SearchOptions(k=3))
    assert r.hits and r.lexical_weight is None and old.components()["lexical_weight"] is None
    hybrid = pipe12.replace(defaults=replace(pipe12.defaults, lexical_weight=0.08))
    assert hybrid.components()["lexical_weight"] == 0.08
    assert hybrid.search("Where is it?", SearchOptions(k=3)).lexical_weight == 0.08


def test_hybrid_with_a_language_filter_and_without_stored_vectors_is_still_exact(encoder, index12, pipe12):
    """A language filter keeps BM25 to the allowed documents but scales by the whole index's best
    BM25; an index that cannot give vectors back (GPU copy, IVF) has the missing cosines embedded
    again. Either way the hits are the exact top of the fused score."""
    from samelang.indexes.vectors import normalise
    from samelang.retrieval.candidates import fuse
    from samelang.retrieval.options import SearchOptions

    q = _question("th")
    allowed = np.isin(pipe12.doc_langs, ["en", "de"])
    cos = index12.vectors(list(range(index12.size))) @ normalise(encoder.encode_queries([q.text]))[0]
    bm25 = index12.lexical.scores(encoder.analyzer[1](q.text))
    fused = fuse(cos, np.where(allowed, bm25, 0.0), 0.08, top=bm25.max())[0]
    fused[~allowed] = -np.inf
    expected = np.argsort(-fused, kind="stable")[:7].tolist()
    opts = SearchOptions(k=7, langs=("en", "de"), group_candidates=False, lexical_weight=0.08)
    got = pipe12.search(q.text, opts)
    assert [h.doc.row for h in got.hits] == expected
    assert [h.score for h in got.hits] == pytest.approx(fused[expected].tolist(), abs=1e-5)

    class NoVectors:  # the index as a GPU copy presents it: no stored vector comes back
        def __init__(self, index):
            self._index = index

        def __getattr__(self, name):
            return getattr(self._index, name)

        def vectors(self, rows):
            return None

    blind = pipe12.replace(index=NoVectors(index12))
    again = blind.search(q.text, opts)
    assert [h.doc.row for h in again.hits] == expected
    assert [h.score for h in again.hits] == pytest.approx(fused[expected].tolist(), abs=1e-4)


def _hit(doc_id: str, text: str):
    from types import SimpleNamespace

    return SimpleNamespace(doc=SimpleNamespace(id=doc_id, text=text))


@pytest.mark.parametrize(
    ("answer", "cited"),
    [
        ("Henry Cole", ["a"]),  # held by one passage
        ("henry  COLE", ["a"]),  # case and spacing ignored
        ("亨利·科尔", ["b"]),  # no spaces to split on: characters
        ("Sir Henry Cole", ["a"]),  # reworded: its longest part (10 of 14 characters) is in "a"
        ("London", ["a", "b"]),  # held by both
        ("the Louvre in Paris", []),  # in neither
        ("", []),
        (None, []),
    ],
)
def test_citations(answer, cited):
    from samelang.retrieval.prompts import citations

    hits = [
        _hit("a", "The first director was Henry Cole, in London."),
        _hit("b", "首任馆长是亨利·科尔。London"),
    ]
    assert citations(answer, hits) == cited


def test_a_fused_rerank_orders_by_both_z_scores(encoder, index12, pipe12):
    """``rerank_fusion`` w: the reranked candidates come in the order of z(reranker) + w z(retriever)
    (0: the reranker's; a large w: nearly the retriever's), and that is the score each hit carries."""
    from dataclasses import replace

    from samelang.core.models.contracts import Capabilities
    from samelang.retrieval.options import SearchOptions
    from samelang.retrieval.pipeline import fuse_scores

    class Reversed:  # a reranker that disagrees with the retriever as much as it can
        name, kind, capabilities = "reversed", "test", Capabilities()

        def score(self, query, docs):
            return -np.arange(len(docs), dtype=np.float64)[::-1]

    q = _question("de").text
    opts = SearchOptions(k=8, rerank=True, rerank_k=8)
    plain = pipe12.search(q, SearchOptions(k=8, rerank=False))
    retrieved = [h.doc.id for h in plain.hits]
    for w in (0.0, 0.5, 100.0):
        pipe = pipe12.replace(reranker=Reversed(), defaults=replace(pipe12.defaults, rerank_fusion=w))
        hits = pipe.search(q, opts).hits
        want = (
            fuse_scores(Reversed().score(q, retrieved), np.array([h.score for h in plain.hits]), w)
            if w
            else (Reversed().score(q, retrieved))
        )
        order = np.argsort(-want, kind="stable")
        assert [h.doc.id for h in hits] == [retrieved[i] for i in order], w
        assert [h.score for h in hits] == pytest.approx([want[i] for i in order])
    assert [h.doc.id for h in hits] == retrieved  # w = 100: the retriever's order
    np.testing.assert_allclose(fuse_scores(np.array([3.0, 1.0]), np.array([0.0, 10.0]), 1.0), [0.0, 0.0], atol=1e-5)
