"""Each route over a real uvicorn server, real models and a real FAISS index."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.core import metrics as M
from samelang.corpora import load_xquad


def test_health_ready_info_metrics_openapi(client):
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/ready").json() == {"status": "ready", "documents": 160}
    info = client.get("/info").json()
    assert info["index"]["counts_per_lang"] == {"en": 80, "zh": 80}
    assert info["reranker"]["name"] == "bi-encoder-cosine" and info["generator"]["name"] == "none"
    client.post("/search", json={"query": "Where is the museum?"})
    text = client.get("/metrics").text
    assert 'samelang_requests_total{method="POST",route="/search",status="200"}' in text
    assert "samelang_request_seconds_bucket" in text
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/search", "/rerank", "/answer", "/diagnose", "/health"} <= set(paths)


def test_chinese_test_question_finds_its_gold_paragraph(client):
    x = load_xquad(["zh"], split="test")
    found = 0
    for q in x.questions[:10]:
        r = client.post("/search", json={"query": q.text, "k": 10})
        assert r.status_code == 200
        body = r.json()
        assert body["query_lang"] == "zh" and body["query_lang_detected"] is True
        assert len(body["hits"]) == 10
        scores = [h["score"] for h in body["hits"]]
        assert scores == sorted(scores, reverse=True)
        found += any(h["group"] == q.group for h in body["hits"])
    assert found >= 9


def test_search_language_filter_and_given_lang(client):
    q = load_xquad(["zh"], split="test").questions[0]
    body = client.post("/search", json={"query": q.text, "k": 5, "langs": ["en"], "lang": "zh"}).json()
    assert body["query_lang"] == "zh" and body["query_lang_detected"] is False
    assert [h["lang"] for h in body["hits"]] == ["en"] * 5
    assert body["hits"][0]["metadata"]["title"]


def test_rerank_orders_by_score(client):
    docs = [
        "Paris est la capitale de la France.",
        {"id": "va", "text": "The Victoria and Albert Museum is in London.", "lang": "en"},
        {"id": "va-zh", "text": "维多利亚和阿尔伯特博物馆位于伦敦。"},
    ]
    r = client.post("/rerank", json={"query": "维多利亚和阿尔伯特博物馆位于哪里？", "documents": docs, "top_n": 2,
                                      "return_documents": True})  # fmt: skip
    assert r.status_code == 200
    body = r.json()
    assert body["reranker"] == "bi-encoder-cosine"
    assert [x["index"] for x in body["results"]] == [2, 1]
    assert body["results"][0]["id"] == "va-zh" and body["results"][0]["lang"] == "zh"
    assert body["results"][1]["text"].startswith("The Victoria")
    assert body["results"][0]["score"] > body["results"][1]["score"]


def test_diagnose_equals_metrics_library_on_the_same_scores(client, encoder, pipeline):
    x = load_xquad(["en", "zh"], split="test")
    queries = [q for q in x.questions if q.lang == "zh"][:12] + [q for q in x.questions if q.lang == "en"][:12]
    body = {
        "queries": [
            {"query": q.text, "lang": q.lang, "relevant": [f"xquad-en-{q.group[6:]}", f"xquad-zh-{q.group[6:]}"]}
            for q in queries
        ],
        "group_candidates": False,  # the plain ranking of documents, as the seed's metric defines it
    }
    r = client.post("/diagnose", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    # the same scores computed directly: the served encoder's queries against the stored vectors
    docs = pipeline.index.docs.get_rows(list(range(160)))
    P = np.stack([pipeline.index.faiss_index.reconstruct(i) for i in range(160)])
    Q = encoder.encode_queries([q.text for q in queries])
    S = Q @ P.T
    R = np.array([[doc.id in item["relevant"] for doc in docs] for item in body["queries"]], float)
    want = M.max_at_r(S, R)
    got = np.array([qd["max_r"] for qd in d["queries"]])
    np.testing.assert_array_equal(got, want)
    assert len(set(got.tolist())) > 3  # a spread of ranks, not a constant
    assert d["pool_size"] == 160 and d["aggregate"]["queries"] == 24
    assert d["aggregate"]["mean_max_r"] == pytest.approx(got.mean())
    assert d["aggregate"]["comp_at_10"] == pytest.approx(100 * (got <= 10).mean())
    norm = M.max_at_r_norm(got, 160, 2).mean()
    assert d["aggregate"]["max_r_norm"] == pytest.approx(norm)
    assert set(d["per_query_lang"]) == {"en", "zh"}
    assert sum(d["top1_lang_matrix"]["zh"].values()) == pytest.approx(100)


def test_diagnose_dataset_mode_and_rerank(client):
    body = {"dataset": "xquad", "split": "test", "pair": "en-zh", "group_candidates": False}
    d = client.post("/diagnose", json=body).json()
    assert d["aggregate"]["queries"] == 748 and d["per_query_lang"]["zh"]["queries"] == 374
    # the base model's known English bias: zh queries need far deeper rankings to find both versions
    assert d["per_query_lang"]["zh"]["mean_max_r"] > d["per_query_lang"]["en"]["mean_max_r"]
    assert d["components"]["candidates"] == "documents"
    # group-aware lists show a hit's other version right after it: both versions come together
    g = client.post("/diagnose", json={**body, "group_candidates": True}).json()
    assert g["components"]["candidates"] == "groups"
    assert g["per_query_lang"]["zh"]["mean_max_r"] < d["per_query_lang"]["zh"]["mean_max_r"] / 2
    assert g["per_query_lang"]["zh"]["comp_at_10"] > d["per_query_lang"]["zh"]["comp_at_10"]
    # with rerank: the reranked head replaces the retrieval order
    q = load_xquad(["zh"], split="test").questions[0]
    rel = [f"xquad-en-{q.group[6:]}", f"xquad-zh-{q.group[6:]}"]
    body = {"queries": [{"query": q.text, "relevant": rel}], "rerank": True, "rerank_k": 5}
    rr = client.post("/diagnose", json=body).json()
    assert rr["reranker"] == "bi-encoder-cosine" and rr["queries"][0]["lang"] == "zh"
    assert rr["queries"][0]["max_r"] == max(rr["queries"][0]["ranks"].values())


def test_diagnose_rejects_unknown_relevant_ids(client):
    r = client.post("/diagnose", json={"queries": [{"query": "x", "relevant": ["nope"]}]})
    assert r.status_code == 422
    assert "relevant" in r.json()["detail"] and "nope" in r.json()["detail"]
    r = client.post("/diagnose", json={"dataset": "xquad", "pair": "en-de"})
    assert r.status_code == 422 and "pair" in r.json()["detail"]


def test_diagnose_without_labels_reports_the_language_bias_of_what_search_serves(client):
    """Queries with no relevant ids: the bias report is the languages of each query's /search top-k."""
    x = load_xquad(["en", "zh"], split="test")
    qs = [q for q in x.questions if q.lang == "zh"][:6] + [q for q in x.questions if q.lang == "en"][:4]
    body = {"queries": [{"query": q.text, "lang": q.lang} for q in qs], "bias_k": 5, "group_candidates": False}
    r = client.post("/diagnose", json=body)
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["labelled"] == 0 and d["aggregate"] is None and d["per_query_lang"] == {}
    assert d["queries"][0]["max_r"] is None and d["queries"][0]["ranks"] == {}
    bias = d["bias"]
    assert bias["k"] == 5 and bias["index_langs"] == {"en": 50.0, "zh": 50.0} and bias["queries"] == {"en": 4, "zh": 6}
    # the same counts from /search itself
    seen = {"en": [], "zh": []}
    for q in qs:
        hits = client.post("/search", json={"query": q.text, "lang": q.lang, "k": 5, "group_candidates": False}).json()
        seen[q.lang].append([h["lang"] for h in hits["hits"]])
    for lang, lists in seen.items():
        flat = [x for top in lists for x in top]
        assert bias["result_langs"][lang] == {y: pytest.approx(100 * flat.count(y) / len(flat)) for y in ("en", "zh")}
        assert bias["sees_other"][lang] == pytest.approx(100 * np.mean([any(y != lang for y in t) for t in lists]))
    assert 0 <= bias["mean_jsd"] <= 1 and set(bias["jsd"]) == {"en", "zh"}
    # labelled and unlabelled together: Max@R over the labelled one only, the bias over all
    q = qs[0]
    body["queries"][0]["relevant"] = [f"xquad-en-{q.group[6:]}", f"xquad-zh-{q.group[6:]}"]
    m = client.post("/diagnose", json=body).json()
    assert m["labelled"] == 1 and m["aggregate"]["queries"] == 1 and m["queries"][0]["max_r"] >= 2
    assert m["queries"][1]["max_r"] is None and m["bias"]["queries"] == {"en": 4, "zh": 6}


def test_diagnose_samples_queries_from_the_index(client):
    """``sample``: one sentence of a document per query, as many per language, the same for a seed;
    its own document is left out of its list (else it would come first by copying)."""
    body = {"sample": 10, "seed": 3, "bias_k": 10}
    a, b = (client.post("/diagnose", json=body).json() for _ in range(2))
    assert [q["query"] for q in a["queries"]] == [q["query"] for q in b["queries"]]
    other = client.post("/diagnose", json={**body, "seed": 4}).json()
    assert [q["query"] for q in other["queries"]] != [q["query"] for q in a["queries"]]
    assert a["labelled"] == 0 and a["bias"]["queries"] == {"en": 5, "zh": 5}
    srcs = {q["source_id"] for q in a["queries"]}
    assert len(srcs) == 10
    copied = 0
    for q in a["queries"]:
        assert q["source_id"].startswith(f"xquad-{q['lang']}-") and q["top1_id"] != q["source_id"]
        top = client.post("/search", json={"query": q["query"], "lang": q["lang"], "k": 1}).json()["hits"][0]
        copied += top["id"] == q["source_id"]
    assert copied >= 8  # why it is left out: /search puts the copied-from document first
    r = client.post("/diagnose", json={"sample": 5, "dataset": "xquad", "pair": "en-zh"})
    assert r.status_code == 422 and "give one of 'queries', 'dataset' (with 'pair') or 'sample'" in r.text
