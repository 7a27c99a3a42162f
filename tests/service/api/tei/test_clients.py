"""Text-embeddings-inference's clients against a real server: huggingface_hub's InferenceClient,
Haystack's TEI embedders and ranker, LangChain's HuggingFaceEndpointEmbeddings (in a venv of its
own); the snippets of docs/api.md and the README run verbatim, and each client's vectors and scores
must be what our own code path gives for the same input."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np

from tests.service.api.snippets import (
    LANGCHAIN_HF,
    client_venv,
    doc_snippet,
    ours,
    readme_query,
    readme_snippet,
    run_readme,
    run_snippet,
)


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
