"""/answer end to end: the embedded generator (llama.cpp), the OpenAI-compatible client against a
real HTTP server (serving the same embedded generator), retries, timeouts and 503s, and prompts
fitted to the generator's context."""

from __future__ import annotations

import threading

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from samelang.core.models.generation import GeneratorUnavailable, LlamaCppGenerator, OpenAIGenerator
from samelang.corpora import load_xquad
from tests.service.conftest import free_port, make_app, running


class Completion(BaseModel):
    model: str
    prompt: str
    max_tokens: int = 16
    temperature: float = 0.0
    stream: bool = False


def openai_stub(gen: LlamaCppGenerator, fail_first: int = 0, hold: threading.Event | None = None,
                context: int | None = None):  # fmt: skip
    """A minimal OpenAI-compatible /v1/completions server over the embedded generator; with ``hold``
    each request waits until the event is set (a server that does not answer in time), and
    ``state.answered`` counts the requests that got past it. ``stream: true`` streams as vLLM does:
    one ``data:`` event per decoded piece, with no stop sequence (the client cuts), then ``[DONE]``.
    ``context``: a prompt longer than this many characters gets vLLM's 400 (the real one is in
    tests/test_vllm_generator.py)."""
    app = FastAPI()
    app.state.calls = 0
    app.state.answered = 0
    app.state.arrived = threading.Semaphore(0)  # released once per request that reached the handler

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "gemma-3-270m", "object": "model"}]}

    @app.post("/v1/completions")
    def completions(req: Completion):
        from fastapi.responses import JSONResponse

        app.state.calls += 1
        app.state.arrived.release()
        if app.state.calls <= fail_first:
            return _error()
        if context is not None and len(req.prompt) > context:
            said = f"This model's maximum context length is {context} tokens. However, your prompt contains more."
            return JSONResponse({"error": {"message": said, "type": "BadRequestError", "code": 400}}, 400)
        if hold is not None:
            hold.wait(120)
            app.state.answered += 1
        if req.stream:
            return _stream(req)
        text = gen.generate(req.prompt, req.max_tokens)
        return {"id": "cmpl-1", "object": "text_completion", "model": req.model,
                "choices": [{"index": 0, "text": " " + text, "finish_reason": "stop"}]}  # fmt: skip

    def _stream(req: Completion):
        import json

        from fastapi.responses import StreamingResponse

        # decoded whole under the model's lock (from a clean context, as LlamaCppGenerator does), then sent
        # piece by piece: the lock is never held by a stream that its client abandoned
        with gen._lock:
            gen.llm.reset()
            chunks = gen.llm.create_completion(
                req.prompt, max_tokens=req.max_tokens, temperature=0.0, top_k=1, repeat_penalty=1.0, stream=True
            )
            texts = [c["choices"][0]["text"] for c in chunks]

        def events():
            for text in texts:
                choice = {"index": 0, "text": text, "finish_reason": None}
                chunk = {"id": "cmpl-1", "object": "text_completion", "model": req.model, "choices": [choice]}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    def _error():
        from fastapi.responses import JSONResponse

        return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)

    return app


def zh_question():
    return next(q for q in load_xquad(["zh"], split="test").questions if q.group == "xquad-23-0")


def test_answer_with_the_embedded_generator(service_settings, pipeline, gemma):
    q = zh_question()
    with running(make_app(service_settings, pipeline, generator=gemma)) as url:
        r = httpx.post(f"{url}/answer", json={"query": q.text, "k": 10, "rerank_k": 10}, timeout=300)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["generator"] == "llama.cpp:gemma-3-270m" and body["query_lang"] == "zh"
    assert body["answer"] and "\n" not in body["answer"]
    # among equivalent documents the reader's language comes first, and no group is cited twice
    assert body["passages"][0]["lang"] == "zh" and body["passages"][0]["group"] == q.group
    groups = [p["group"] for p in body["passages"]]
    assert len(groups) == len(set(groups))
    assert body["answer_lang"] == "zh"


def test_openai_generator_against_a_real_server(service_settings, pipeline, gemma):
    stub = openai_stub(gemma, fail_first=1)
    with running(stub) as llm_url:
        gen = OpenAIGenerator(llm_url, "gemma-3-270m", timeout=120, retries=2, backoff=0.01)
        with running(make_app(service_settings, pipeline, generator=gen)) as url:
            r = httpx.post(f"{url}/answer", json={"query": zh_question().text}, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["generator"] == "openai:gemma-3-270m" and r.json()["answer"]
        assert stub.state.calls == 2  # one 503, retried once


def test_openai_generator_timeout_and_retries(gemma):
    # the stub answers nobody until released: the client gave up by its own timeout (no clock here)
    hold = threading.Event()
    stub = openai_stub(gemma, hold=hold)
    with running(stub) as llm_url:
        gen = OpenAIGenerator(llm_url, "m", timeout=0.5, retries=1, backoff=0.01)
        try:
            with pytest.raises(GeneratorUnavailable, match="after 2 attempts"):
                gen.generate("Question: x\nAnswer:", 4)
            # the client gives up on its own clock; on a loaded machine the server may reach the second
            # request's handler only after that, so wait for both arrivals rather than read the count at once
            assert stub.state.arrived.acquire(timeout=60) and stub.state.arrived.acquire(timeout=60)
            assert stub.state.calls == 2 and stub.state.answered == 0
        finally:
            hold.set()
    stub = openai_stub(gemma, fail_first=10)
    with running(stub) as llm_url:
        with pytest.raises(GeneratorUnavailable, match="503"):
            OpenAIGenerator(llm_url, "m", timeout=5, retries=2, backoff=0.01).generate("x", 4)
        assert stub.state.calls == 3


def test_a_prompt_the_generator_refuses_is_a_422_with_its_words(service_settings, pipeline, gemma):
    stub = openai_stub(gemma, context=50)  # every /answer prompt is longer
    with running(stub) as llm_url:
        gen = OpenAIGenerator(llm_url, "gemma-3-270m", timeout=30, retries=2, backoff=0.01)
        assert gen.probe() is None
        assert "serves ['gemma-3-270m'], not 'other'" in OpenAIGenerator(llm_url, "other").probe()
        with running(make_app(service_settings, pipeline, generator=gen)) as url:
            r = httpx.post(f"{url}/answer", json={"query": zh_question().text}, timeout=120)
            streamed = httpx.post(f"{url}/answer", json={"query": zh_question().text, "stream": True}, timeout=120)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "generator_refused" and "maximum context length is 50 tokens" in body["detail"]
    assert "fewer passages or a lower max_tokens" in body["detail"] and body["passages"]
    assert stub.state.calls == 2  # the same prompt is not asked again: once each, plain and streamed
    assert streamed.text.index("event: passages") < streamed.text.index("event: error")
    assert "generator_refused" in streamed.text
    assert "nothing answers at" in OpenAIGenerator(f"http://127.0.0.1:{free_port()}", "m").probe()


def test_answer_is_503_with_passages_when_the_generator_is_down(service_settings, pipeline):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    gen = OpenAIGenerator(dead, "m", timeout=1, retries=1, backoff=0.01)
    with running(make_app(service_settings, pipeline, generator=gen)) as url:
        r = httpx.post(f"{url}/answer", json={"query": zh_question().text}, timeout=60)
    assert r.status_code == 503
    body = r.json()
    assert body["error"] == "generator_unavailable" and dead in body["detail"]
    assert body["passages"] and body["passages"][0]["lang"] == "zh"


def test_answer_without_generator_returns_passages(client):
    r = client.post("/answer", json={"query": zh_question().text})
    assert r.status_code == 200
    assert r.json()["answer"] is None and r.json()["generator"] == "none" and len(r.json()["passages"]) == 2


def test_prompt_fits_the_generator_context(gemma):
    # a small context: three passages do not fit, the last ones are dropped; a lone passage too long is cut
    from types import SimpleNamespace

    from samelang.core.models.contracts import Capabilities
    from samelang.retrieval.prompts import fit_prompt

    small = LlamaCppGenerator(gemma.path, n_ctx=256)
    paragraphs = [p for p in load_xquad(["en"], split="test").paragraphs][:3]
    hits = [SimpleNamespace(doc=SimpleNamespace(text=p.text)) for p in paragraphs]
    assert all(small.count_tokens(p.text) > 100 for p in paragraphs)
    kept, prompt = fit_prompt(small, "Who?", hits, max_tokens=16)
    assert 1 <= len(kept) < 3 and small.count_tokens(prompt) + 16 <= 256
    assert prompt.startswith(paragraphs[0].text[:200]) and prompt.endswith("Question: Who?\nAnswer:")
    long = [SimpleNamespace(doc=SimpleNamespace(text=" ".join(p.text for p in paragraphs)))]
    kept, prompt = fit_prompt(small, "Who?", long, max_tokens=16)
    assert len(kept) == 1 and small.count_tokens(prompt) + 16 <= 256
    assert prompt.startswith(paragraphs[0].text[:100]) and prompt.endswith("Question: Who?\nAnswer:")
    # the generator answers within that context
    assert isinstance(small.generate(prompt, 16), str)
    # a remote generator (no context limit known here: it declares no fit check) gets every passage
    remote = SimpleNamespace(capabilities=Capabilities())
    kept, prompt = fit_prompt(remote, "Who?", hits, max_tokens=16)
    assert len(kept) == 3


def test_the_same_prompt_gets_the_same_answer_whatever_came_before(gemma):
    # llama.cpp's reuse of the previous request's cache changed these two answers when a prompt came twice
    from samelang.retrieval.prompts import build_prompt

    en = {p.group: p.text for p in load_xquad(["en"], split="test").paragraphs}
    for lang in ("en", "zh"):
        q = load_xquad([lang], split="test").questions[0]
        prompt = build_prompt(q.text, [en[q.group]])
        first = gemma.generate(prompt, 16)
        assert gemma.generate(prompt, 16) == first, lang


def test_a_prompt_has_at_most_one_token_per_byte(gemma):
    # LlamaCppGenerator.fits skips counting tokens below this bound: it must hold in every language
    from samelang.corpora import XQUAD_LANGS

    texts = [p.text for p in load_xquad(XQUAD_LANGS, split="test").paragraphs]
    texts += [q.text for q in load_xquad(XQUAD_LANGS, split="test").questions[::40]]
    slack = [len(t.encode("utf-8")) + 2 - gemma.count_tokens(t) for t in texts]
    assert min(slack) >= 0, min(slack)
