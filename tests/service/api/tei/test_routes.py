"""The routes shaped like text-embeddings-inference (:mod:`samelang.service.api.tei`) on a real
server: the same vectors and scores as our own routes, TEI's defaults where our models allow them,
and a 422 naming the field where they do not."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.service.conftest import running

QUERY = "维多利亚和阿尔伯特博物馆在哪里？"  # zh: where is the V&A museum?
DOCS = ["The V&A museum is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。", "Paris est en France."]


def _openai(client, texts, input_type="query") -> np.ndarray:
    body = {"model": "multilingual-e5-small", "input": texts, "input_type": input_type}
    r = client.post("/v1/embeddings", json=body)
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]])


@pytest.mark.parametrize("path", ["/embed", "/"])
def test_embed_gives_the_openai_routes_vectors(client, path):
    """A named prompt is ``input_type``; without one the texts go as sent (TEI's default), so a client
    that writes e5's prompt itself (Haystack's ``prefix``) gets the same vectors."""
    texts = ["Who was the first director of the V&A?", "谁是V＆A的第一任馆长？"]
    for prompt in ("query", "passage"):
        r = client.post(path, json={"inputs": texts, "prompt_name": prompt})
        assert r.status_code == 200, r.text
        np.testing.assert_allclose(np.array(r.json()), _openai(client, texts, prompt), atol=1e-6)
        by_hand = client.post(path, json={"inputs": [f"{prompt}: {t}" for t in texts]}).json()
        np.testing.assert_allclose(np.array(by_hand), _openai(client, texts, prompt), atol=1e-6)
    bare = np.array(client.post(path, json={"inputs": texts}).json())
    assert not np.allclose(bare, _openai(client, texts), atol=1e-3)  # no prompt: not the query vectors
    one = client.post(path, json={"inputs": texts[0]}).json()  # a lone text: a list of one vector, as TEI
    assert len(one) == 1 and len(one[0]) == 384


def test_embed_refuses_what_would_silently_change_nothing_or_cut(client):
    long = "word " * 600
    r = client.post("/embed", json={"inputs": ["short", long]})  # truncate: false is TEI's default
    assert r.status_code == 422 and "inputs[1]" in r.json()["detail"] and "512-token" in r.json()["detail"]
    cut = client.post("/embed", json={"inputs": [long], "truncate": True, "prompt_name": "query"})
    np.testing.assert_allclose(np.array(cut.json()), _openai(client, [long]), atol=1e-6)  # cut as every route cuts
    for body, field in (({"inputs": "x", "truncation_direction": "left"}, "truncation_direction"),
                        ({"inputs": [1, 2, 3]}, "inputs"),
                        ({"inputs": "x", "prompt_name": "document"}, "prompt_name")):  # fmt: skip
        r = client.post("/embed", json=body)
        assert r.status_code == 422 and r.json()["detail"].startswith(field), (body, r.text)


def test_embed_without_normalising_gives_the_pooled_vectors(client, encoder):
    """``normalize: false`` (Haystack's TEI embedders' default): the mean-pooled vectors, which
    normalised are the vectors of every other route."""
    texts = ["Who was the first director of the V&A?", "维多利亚和阿尔伯特博物馆位于伦敦。"]
    raw = np.array(client.post("/embed", json={"inputs": texts, "normalize": False, "prompt_name": "passage"}).json())
    np.testing.assert_allclose(raw, encoder.encode_text(texts, encoder.prompt(passages=True), pooled=True), atol=1e-5)
    assert np.all(np.abs(np.linalg.norm(raw, axis=1) - 1) > 0.1)  # not unit vectors
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(unit, _openai(client, texts, "passage"), atol=1e-6)


def test_tokenize_shows_the_tokens_the_encoder_runs(client, encoder):
    text = "Wie heißt du?"
    toks = client.post("/tokenize", json={"inputs": text, "prompt_name": "query"}).json()[0]
    want = encoder.engine.tokenizer.encode(encoder.prompt() + text)
    assert [t["id"] for t in toks] == want.ids  # the prompt and the special tokens included, as encoded
    own = [t for t in toks if t["start"] is not None]
    assert "".join(text[t["start"] : t["stop"]] for t in own).replace(" ", "") == text.replace(" ", "")
    assert toks[0]["special"] and toks[-1]["special"] and not own[0]["special"]
    bare = client.post("/tokenize", json={"inputs": [text], "add_special_tokens": False}).json()[0]
    assert [t["id"] for t in bare] == encoder.engine.tokenizer.encode(text, add_special_tokens=False).ids


def test_info_carries_teis_fields_beside_ours(client, encoder):
    info = client.get("/info").json()
    assert info["model_id"] == encoder.name and info["max_input_length"] == 512
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_client_batch_size"] == 256
    assert info["encoder"]["name"] == encoder.name  # ours, unchanged


@pytest.fixture(scope="module")
def lamar(service_settings, served_cross_encoder):
    """A server whose reranker is the served LAMAR cross-encoder (sigmoid scores, logits under them)."""
    from samelang.service.api.app import create_app

    cfg = service_settings.model_copy(update={"reranker": str(served_cross_encoder)})
    with running(create_app(cfg)) as url, httpx.Client(base_url=url, timeout=120) as c:
        yield c


def test_rerank_tells_teis_body_from_ours_and_scores_alike(lamar):
    ours = lamar.post("/rerank", json={"query": QUERY, "documents": DOCS}).json()["results"]
    tei = lamar.post("/rerank", json={"query": QUERY, "texts": DOCS, "return_text": True})
    assert tei.status_code == 200, tei.text
    assert [(r["index"], r["score"]) for r in tei.json()] == [(r["index"], r["score"]) for r in ours]
    assert [r["text"] for r in tei.json()] == [DOCS[r["index"]] for r in ours]
    raw = lamar.post("/rerank", json={"query": QUERY, "texts": DOCS, "raw_scores": True}).json()
    assert [r["index"] for r in raw] == [r["index"] for r in ours]
    np.testing.assert_allclose(1 / (1 + np.exp(-np.array([r["score"] for r in raw]))),
                               [r["score"] for r in ours], rtol=1e-6)  # fmt: skip
    assert any(r["score"] < 0 or r["score"] > 1 for r in raw)  # logits, not probabilities


def test_rerank_errors_name_the_field_of_the_body_sent(lamar):
    r = lamar.post("/rerank", json={"query": QUERY, "texts": ["x", "word " * 400]})  # over the 256-token window
    assert r.status_code == 422 and r.json()["detail"].startswith("texts[1]") and "256-token" in r.json()["detail"]
    ok = lamar.post("/rerank", json={"query": QUERY, "texts": ["x", "word " * 400], "truncate": True})
    assert ok.status_code == 200 and len(ok.json()) == 2
    mixed = lamar.post("/rerank", json={"query": QUERY, "texts": DOCS, "documents": DOCS})
    assert mixed.status_code == 422 and mixed.json()["detail"].startswith("documents"), mixed.text
    too_many = lamar.post("/rerank", json={"query": QUERY, "texts": ["x"] * 101})
    assert too_many.status_code == 422 and too_many.json()["detail"].startswith("texts"), too_many.text
    theirs = lamar.post("/rerank", json={"query": QUERY, "documents": []})
    assert theirs.status_code == 422 and theirs.json()["detail"].startswith("documents"), theirs.text


def test_the_schema_documents_both_rerank_bodies(client):
    schema = client.get("/openapi.json").json()
    body = schema["paths"]["/rerank"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    refs = {x["$ref"].rsplit("/", 1)[1] for x in body["oneOf"]}
    assert refs == {"RerankRequest", "TeiRerankRequest"}
    assert {"/embed", "/", "/tokenize"} <= set(schema["paths"])
