"""The ecosystem's own clients against a real server: the snippets of docs/api.md (the OpenAI SDK, the
Cohere v2 SDK, LangChain's OpenAIEmbeddings, LlamaIndex's OpenAILikeEmbedding) run verbatim, unpatched,
and what each returns must be what our own code path gives for the same input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from samelang.indexes.vectors import normalise
from tests.service.conftest import make_app, running

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"


def doc_snippet(name: str) -> str:
    """The python block that follows ``<!-- snippet: name -->`` in docs/api.md."""
    m = re.search(rf"<!-- snippet: {name} -->\n```python\n(.*?)```", API_DOC.read_text(), re.S)
    assert m, f"docs/api.md has no snippet {name!r}"
    return m.group(1)


def run_snippet(name: str, url: str, monkeypatch, api_key: str | None = None) -> dict:
    monkeypatch.setenv("SAMELANG_URL", url)
    if api_key:
        monkeypatch.setenv("SAMELANG_API_KEY", api_key)
    else:
        monkeypatch.delenv("SAMELANG_API_KEY", raising=False)
    ns: dict = {}
    exec(compile(doc_snippet(name), f"docs/api.md:{name}", "exec"), ns)  # noqa: S102 - the page's own code
    return ns


def ours(encoder, texts: list[str], passages: bool = False) -> np.ndarray:
    return normalise(encoder.encode_passages(texts) if passages else encoder.encode_queries(texts))


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


def readme_snippet(package: str, url: str) -> str:
    """The README's python block that starts by importing from ``package``, at ``url``."""
    text = API_DOC.parents[1].joinpath("README.md").read_text()
    m = re.search(rf"```python\n(from {package}\b.*?)```", text, re.S)
    assert m, f"README.md has no snippet importing {package}"
    return m.group(1).replace("http://127.0.0.1:8000", url)


def run_readme(package: str, url: str) -> dict:
    ns: dict = {}
    exec(compile(readme_snippet(package, url), f"README.md:{package}", "exec"), ns)  # noqa: S102 - the README's code
    return ns


def readme_query(encoder) -> np.ndarray:
    """The vector the README's snippets ask for, as /v1/embeddings gives it."""
    return ours(encoder, ["谁是V＆A的第一任馆长？"])[0]


def test_huggingface_hub_inference_client_speaks_tei(server, encoder, monkeypatch):
    """huggingface_hub's InferenceClient, given the server's URL as its model, posts TEI's embed body
    to it (``POST /``): the vectors are /v1/embeddings', prompt included."""
    ns = run_snippet("tei-hub", server, monkeypatch)
    np.testing.assert_allclose(ns["q"], ours(encoder, ["Who was the first director of the V&A?"])[0], atol=1e-6)
    np.testing.assert_allclose(
        ns["d"], ours(encoder, ["维多利亚和阿尔伯特博物馆位于伦敦。"], passages=True)[0], atol=1e-6
    )
    assert ns["q"].shape == (encoder.dim,)  # one text in, one vector out (TEI answers [[...]])
    np.testing.assert_allclose(run_readme("huggingface_hub", server)["vec"], readme_query(encoder), atol=1e-6)


def test_haystack_tei_embedders_and_ranker(server, client, encoder, monkeypatch):
    """Haystack's TEI text and document embedders (with e5's prompts as their ``prefix``) and its TEI
    ranker: the vectors of /v1/embeddings, the scores and order of /rerank."""
    ns = run_snippet("tei-haystack", server, monkeypatch)
    np.testing.assert_allclose(ns["q"], ours(encoder, [ns["question"]])[0], atol=1e-6)
    texts = ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。"]
    by_text = {d.content: d for d in ns["docs"]}
    np.testing.assert_allclose([by_text[t].embedding for t in texts], ours(encoder, texts, passages=True), atol=1e-6)
    np.testing.assert_allclose(run_readme("haystack_integrations", server)["vec"], readme_query(encoder), atol=1e-6)
    r = client.post("/rerank", json={"query": "维多利亚和阿尔伯特博物馆在哪里？", "documents": texts})
    want = [(texts[x["index"]], x["score"]) for x in r.json()["results"]]
    assert [d.content for d in ns["ranked"]] == [t for t, _ in want]
    np.testing.assert_allclose([d.score for d in ns["ranked"]], [x for _, x in want], atol=1e-6)


# LangChain's TEI client runs from a venv of its own: it pins huggingface-hub < 1 (ours is 2.x), and 1.2.0
# is its last release that takes an endpoint's URL (1.2.1 on refuse one: "must be a HuggingFace repo ID")
LANGCHAIN_HF = ("langchain-huggingface==1.2.0", "numpy")  # numpy: huggingface_hub decodes vectors with it


def client_venv(home: Path, requirements: tuple[str, ...]) -> Path:
    """A venv holding one client's ``requirements`` (made once under ``home``, ~20 s), so that its pins
    never touch ours."""
    venv = Path(home) / "clients" / requirements[0].replace("==", "-")
    if not (venv / "READY").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *requirements], check=True)
        (venv / "READY").write_text(" ".join(requirements) + "\n")
    return venv


def test_langchain_huggingface_endpoint_embeddings(server, encoder, samelang_home):
    """LangChain's HuggingFaceEndpointEmbeddings (TEI's protocol, in its own venv): with e5's prompts
    written before the texts, the vectors of /v1/embeddings."""
    venv = client_venv(samelang_home, LANGCHAIN_HF)
    code = doc_snippet("tei-langchain") + "\nimport json\nprint(json.dumps({'q': q, 'd': d}))\n"
    env = {**os.environ, "SAMELANG_URL": server}
    env.pop("SAMELANG_API_KEY", None)
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(got["q"], ours(encoder, ["Who was the first director of the V&A?"])[0], atol=1e-6)
    texts = ["The V&A is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。"]
    np.testing.assert_allclose(got["d"], ours(encoder, texts, passages=True), atol=1e-6)
    code = readme_snippet("langchain_huggingface", server) + "\nimport json\nprint(json.dumps(vec))\n"
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    np.testing.assert_allclose(json.loads(out.stdout.strip().splitlines()[-1]), readme_query(encoder), atol=1e-6)
