"""The ecosystem's own clients against a real server: the snippets of docs/api.md (the OpenAI SDK, the
Cohere v2 SDK, LangChain's OpenAIEmbeddings, LlamaIndex's OpenAILikeEmbedding) run verbatim, unpatched,
and what each returns must be what our own code path gives for the same input."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.service.api.snippets import ours, run_snippet
from tests.service.conftest import make_app, running


def test_openai_sdk(server, encoder, monkeypatch):
    ns = run_snippet("openai", server, monkeypatch)
    question, docs = ns["question"], ns["docs"]
    assert question.model == encoder.name == "multilingual-e5-small"
    # the SDK asked for base64 (its default) and decoded it: the vectors are the served encoder's
    np.testing.assert_allclose(ns["vector"], ours(encoder, ["Who was the first director of the V&A?"])[0], atol=1e-6)
    texts = ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。"]
    got = np.array([d.embedding for d in docs.data])
    np.testing.assert_allclose(got, ours(encoder, texts, passages=True), atol=1e-6)
    assert [d.index for d in docs.data] == [0, 1]
    assert docs.usage.prompt_tokens == docs.usage.total_tokens == sum(encoder.count_tokens(texts, passages=True))
    # the passage prompt is not the query prompt
    assert not np.allclose(got, ours(encoder, texts), atol=1e-3)


def test_cohere_v2_sdk(server, client, monkeypatch):
    ns = run_snippet("cohere", server, monkeypatch)
    ranked = ns["ranked"]
    docs = ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。", "Paris est en France."]
    r = client.post("/rerank", json={"query": "维多利亚和阿尔伯特博物馆在哪里？", "documents": docs, "top_n": 2})
    assert r.status_code == 200, r.text
    want = [(x["index"], x["score"]) for x in r.json()["results"]]
    assert [(x.index, x.relevance_score) for x in ranked.results] == want
    assert ns["best"] == want[0][0] and len(ranked.results) == 2


def test_langchain_openai_embeddings(server, encoder, monkeypatch):
    ns = run_snippet("langchain", server, monkeypatch)
    np.testing.assert_allclose(ns["q"], ours(encoder, ["Who was the first director of the V&A?"])[0], atol=1e-6)
    texts = ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。"]
    np.testing.assert_allclose(ns["d"], ours(encoder, texts, passages=True), atol=1e-6)


def test_llamaindex_openai_like_embedding(server, encoder, monkeypatch):
    ns = run_snippet("llamaindex", server, monkeypatch)
    np.testing.assert_allclose(ns["q"], ours(encoder, ["Who was the first director of the V&A?"])[0], atol=1e-6)


@pytest.fixture(scope="module")
def keyed_server(service_settings, pipeline):
    with running(make_app(service_settings.model_copy(update={"api_key": "s3cret"}), pipeline)) as url:
        yield url


def test_the_clients_use_the_same_api_key(keyed_server, monkeypatch):
    import openai

    with pytest.raises(openai.AuthenticationError):
        run_snippet("openai", keyed_server, monkeypatch, api_key="wrong")
    assert len(run_snippet("openai", keyed_server, monkeypatch, api_key="s3cret")["vector"]) == 384
    assert run_snippet("cohere", keyed_server, monkeypatch, api_key="s3cret")["ranked"].results


def test_embeddings_formats_and_extensions(client, encoder):
    text = "Wer war der erste Direktor?"
    f = client.post("/v1/embeddings", json={"model": encoder.name, "input": text})
    b = client.post("/v1/embeddings", json={"model": encoder.name, "input": [text], "encoding_format": "base64"})
    assert f.status_code == b.status_code == 200, (f.text, b.text)
    import base64

    decoded = np.frombuffer(base64.b64decode(b.json()["data"][0]["embedding"]), dtype="<f4")
    np.testing.assert_array_equal(np.array(f.json()["data"][0]["embedding"], dtype=np.float32), decoded)
    assert f.json()["object"] == "list" and f.json()["data"][0]["object"] == "embedding"
    same = client.post("/v1/embeddings", json={"model": encoder.name, "input": text, "dimensions": encoder.dim})
    assert same.status_code == 200  # the model's own size is no change


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"input": "x", "dimensions": 128}, "dimensions: 128 is not supported: multilingual-e5-small has 384 "
         "dimensions and cannot shorten them; omit the field"),
        ({"input": [[101, 2040]]}, "input: token ids are not accepted (they are an OpenAI tokenizer's, not this "
         "model's): send text. LangChain's OpenAIEmbeddings sends ids unless check_embedding_ctx_length=False"),
        ({"input": [17, 18]}, "input: token ids are not accepted"),
        ({"input": "x", "model": "text-embedding-3-small"}, "model: 'text-embedding-3-small' is not served here; "
         "this server serves 'multilingual-e5-small' (GET /v1/models)"),
        ({"input": []}, "input: List should have at least 1 item after validation, not 0"),
        ({"input": "   "}, "input[0]: must not be empty or only whitespace"),
        ({"input": ["ok", "x" * 20001]}, "input[1]: String should have at most 20000 characters"),
        ({"input": "x", "input_type": "document"}, "input_type: Input should be 'query' or 'passage'"),
        ({"input": "x", "stream": True}, "stream: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_embeddings_bad_input_is_a_422_naming_the_field(client, encoder, body, detail):
    r = client.post("/v1/embeddings", json={"model": encoder.name, **body})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid_request" and r.json()["detail"].startswith(detail), r.json()["detail"]


def test_embeddings_inputs_are_bounded(service_settings, pipeline, encoder):
    cfg = service_settings.model_copy(update={"max_embedding_inputs": 3})
    with running(make_app(cfg, pipeline, limits=pipeline.limits.__class__(max_embedding_inputs=3))) as url:
        r = httpx.post(f"{url}/v1/embeddings", json={"model": encoder.name, "input": ["a", "b", "c", "d"]}, timeout=60)
    assert r.status_code == 422 and r.json()["detail"] == "input: 4 texts, at most 3 per request"


def test_compat_rerank_shapes(client):
    zh = {"text": "维多利亚和阿尔伯特博物馆位于伦敦。", "lang": "zh"}
    docs = ["The V&A is in London.", zh, "Paris est en France."]
    q = "维多利亚和阿尔伯特博物馆在哪里？"
    r = client.post("/v1/rerank", json={"model": "bi-encoder-cosine", "query": q, "documents": docs,
                                        "return_documents": True})  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "bi-encoder-cosine" and body["id"] == r.headers["x-request-id"]
    assert body["usage"]["total_tokens"] > 0
    assert [x["document"]["text"] for x in body["results"]] == [
        d if isinstance(d, str) else d["text"] for d in (docs[x["index"]] for x in body["results"])
    ]
    assert {x["index"]: x["lang"] for x in body["results"]}[1] == "zh"
    # max_tokens_per_doc cuts each document before scoring: one token of each is a different ranking input
    cut = client.post("/v2/rerank", json={"model": "bi-encoder-cosine", "query": q, "documents": docs,
                                          "max_tokens_per_doc": 1})  # fmt: skip
    assert cut.status_code == 200 and cut.json()["usage"]["total_tokens"] < body["usage"]["total_tokens"]
    bad = client.post("/v1/rerank", json={"model": "rerank-v3.5", "query": q, "documents": docs})
    assert bad.status_code == 422 and "bi-encoder-cosine" in bad.json()["detail"]


def test_models_lists_what_is_served(client, encoder):
    import openai

    r = client.get("/v1/models")
    assert r.status_code == 200
    cards = {m["id"]: m for m in r.json()["data"]}
    assert cards[encoder.name]["task"] == "embeddings" and cards[encoder.name]["dimensions"] == encoder.dim
    assert cards["bi-encoder-cosine"]["task"] == "rerank"
    listed = openai.OpenAI(base_url=str(client.base_url) + "/v1", api_key="none").models.list()
    assert {m.id for m in listed} == set(cards)
