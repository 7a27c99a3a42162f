"""Group-aware candidates over a real 12-language FAISS index (two held-out XQuAD articles, every
paragraph in all 12 languages), the real base model, and a real HTTP server."""

from __future__ import annotations

import httpx
import pytest

from indexes.corpora import XQUAD_LANGS, load_xquad
from indexes.corpora.records import Document
from indexes.index import build_index, open_index
from indexes.langid import get_identifier
from tests.service.conftest import make_app, running

ARTICLES = {2, 5}  # two test articles (SPLIT.json: article % 3 == 2)


def _docs(grouped: bool = True) -> list[Document]:
    docs = [d for d in load_xquad(XQUAD_LANGS, split="test").documents() if d.metadata["article"] in ARTICLES]
    return docs if grouped else [Document(d.id, d.text, d.lang, None, d.metadata) for d in docs]


@pytest.fixture(scope="module")
def index12(tmp_path_factory, encoder):
    out = tmp_path_factory.mktemp("idx12") / "xquad-12"
    build_index(out, _docs(), encoder.encode_passages, encoder.info, source="xquad:12:2 test articles")
    return open_index(out, encoder.info)


@pytest.fixture(scope="module")
def pipe12(encoder, index12):
    from service.models.generation import NoGenerator
    from service.models.reranker import CosineReranker
    from service.pipeline import Defaults, Limits, Pipeline

    return Pipeline(encoder, index12, CosineReranker(encoder), NoGenerator(), get_identifier(), Limits(20, 5000),
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
    from service.pipeline import SearchOptions

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
    assert body["components"] == {"retriever": "multilingual-e5-small", "reranker": None, "candidates": "groups"}


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
    assert info["defaults"] == {"retriever": "multilingual-e5-small", "reranker": None, "rerank_k": None,
                                "candidates": "groups", "reranks_by_default": False}  # fmt: skip
