"""``/answer`` with ``stream: true``, read by a real SSE client (httpx-sse) from a real server, for the
embedded generator and for the OpenAI-compatible one (a server that streams as vLLM does).

No clock: a gate around the real generator holds the generation until the client has *received*
the event in question, so a server that buffered its events would never release it (the test would
fail on the gate's timeout, not on a time threshold)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from httpx_sse import connect_sse

from samelang.core.models.generation import OpenAIGenerator
from tests.service.api.native.test_answer import openai_stub, zh_question
from tests.service.conftest import free_port, make_app, running

WAIT_S = 120  # how long the gate waits for the client before it reports the event as never delivered


class Gate:
    """The real generator, holding its stream at two points until the client has the event: the start
    (until the passages arrived) and after the first piece (until that token arrived)."""

    def __init__(self, generator):
        self.generator = generator
        self.passages_received, self.token_received = threading.Event(), threading.Event()
        self.passages_before_start = self.token_before_end = self.budget = None
        self.pieces = 0

    def __getattr__(self, name):
        return getattr(self.generator, name)

    def stream(self, prompt: str, max_tokens: int):
        from samelang.core import budget

        self.budget = budget.current()  # the request's: a test can see it cancelled, whenever the work ends
        self.passages_before_start = self.passages_received.wait(WAIT_S)
        for piece in self.generator.stream(prompt, max_tokens):
            yield piece
            self.pieces += 1
            if self.pieces == 1:  # the generation goes on only once the reader has its first token
                self.token_before_end = self.token_received.wait(WAIT_S)


def read_stream(url: str, body: dict, gate: Gate | None = None) -> list[tuple[str, dict]]:
    events = []
    with httpx.Client(timeout=300) as c, connect_sse(c, "POST", f"{url}/answer", json={**body, "stream": True}) as s:
        assert s.response.status_code == 200 and s.response.headers["content-type"].startswith("text/event-stream")
        for e in s.iter_sse():
            events.append((e.event, e.json()))
            if gate is not None:
                (gate.passages_received if e.event == "passages" else gate.token_received).set()
    return events


def check_stream(events: list[tuple[str, dict]], plain: dict) -> None:
    """passages, tokens, done; the done event is the non-streaming answer, and the tokens make it."""
    names = [n for n, _ in events]
    assert names[0] == "passages" and names[-1] == "done" and set(names[1:-1]) == {"token"}, names
    first, done = events[0][1], events[-1][1]
    assert first["passages"] == plain["passages"] and first["generator"] == plain["generator"]
    timing = done.pop("timing")
    assert done == plain
    assert "".join(d["text"] for n, d in events if n == "token").strip() == plain["answer"]
    assert timing["retrieval_ms"] <= timing["first_token_ms"] <= timing["total_ms"]


def test_stream_from_the_embedded_generator(service_settings, pipeline, gemma):
    q = zh_question()
    body = {"query": q.text, "k": 10, "rerank_k": 10, "max_tokens": 32}
    gate = Gate(gemma)
    with running(make_app(service_settings, pipeline, generator=gate)) as url:
        plain = httpx.post(f"{url}/answer", json=body, timeout=300)
        gate.passages_received.set(), gate.token_received.set()  # the waited-for answer needs no gate
        assert plain.status_code == 200, plain.text
        gate.passages_received.clear(), gate.token_received.clear()
        events = read_stream(url, body, gate)
    # the reader had the passages before the generator started, and a token before it finished
    assert gate.passages_before_start is True and gate.token_before_end is True
    check_stream(events, plain.json())
    assert plain.json()["answer"] and plain.json()["answer_lang"] == "zh"
    assert plain.json()["citations"] and set(plain.json()["citations"]) <= {p["id"] for p in plain.json()["passages"]}


def test_stream_through_an_openai_compatible_server(service_settings, pipeline, gemma):
    with running(openai_stub(gemma)) as llm_url:
        gen = OpenAIGenerator(llm_url, "gemma-3-270m", timeout=120, retries=1, backoff=0.01)
        with running(make_app(service_settings, pipeline, generator=gen)) as url:
            body = {"query": zh_question().text, "max_tokens": 32}
            plain = httpx.post(f"{url}/answer", json=body, timeout=300)
            assert plain.status_code == 200, plain.text
            events = read_stream(url, body)
    assert plain.json()["generator"] == "openai:gemma-3-270m" and plain.json()["answer"]
    check_stream(events, plain.json())


def test_stream_errors(service_settings, pipeline, client):
    # before the first event: a plain JSON error with its status
    r = client.post("/answer", json={"query": "x", "stream": True, "passages": 10, "max_tokens": 512})
    assert r.status_code == 422 and r.headers["content-type"] == "application/json"
    assert r.json()["detail"].startswith("max_tokens: passages x max_tokens")
    # after it: the passages, then an error event with the 503's body (passages included)
    dead = f"http://127.0.0.1:{free_port()}"
    gen = OpenAIGenerator(dead, "m", timeout=1, retries=0, backoff=0.01)
    with running(make_app(service_settings, pipeline, generator=gen)) as url:
        events = read_stream(url, {"query": zh_question().text})
    assert [n for n, _ in events] == ["passages", "error"]
    err = events[1][1]
    assert err["error"] == "generator_unavailable" and dead in err["detail"]
    assert err["passages"] == events[0][1]["passages"]


def test_stream_without_a_generator(server):
    events = read_stream(server, {"query": zh_question().text})
    assert [n for n, _ in events] == ["passages", "done"]
    done = events[1][1]
    assert done["answer"] is None and done["citations"] == [] and done["timing"]["first_token_ms"] is None


def wait_for(predicate, what: str) -> None:
    for _ in range(WAIT_S * 10):
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.parametrize("leave_after", ["passages", "token"])
def test_a_reader_who_leaves_stops_the_generation(service_settings, pipeline, gemma, leave_after):
    gate = Gate(gemma)
    app = make_app(service_settings, pipeline, generator=gate)
    with running(app) as url:
        with httpx.Client(timeout=300) as c:
            body = {"query": zh_question().text, "stream": True, "max_tokens": 64}
            with connect_sse(c, "POST", f"{url}/answer", json=body) as s:
                for e in s.iter_sse():
                    if e.event == "passages":
                        gate.passages_received.set()
                    if e.event == leave_after:
                        break
        # the generation is held after its first token until the server saw the reader go (it may also stop
        # at its first check, before that token, when the server notices first)
        wait_for(lambda: gate.budget is not None and gate.budget.cancelled, "the budget cancelled")
        gate.passages_received.set(), gate.token_received.set()
        wait_for(lambda: 'cancelled_total{reason="disconnected"} 1.0' in httpx.get(f"{url}/metrics").text,
                 "the generation stopped as cancelled")  # fmt: skip
        # the embedded generator is free again: a next answer is not stuck behind the abandoned one
        r = httpx.post(f"{url}/answer", json={"query": zh_question().text, "max_tokens": 8}, timeout=300)
        assert r.status_code == 200 and r.json()["answer"], r.text


def test_a_stream_past_its_budget_ends_with_an_error_event(service_settings, pipeline, gemma):
    # the generation is held after its first token and never checks its budget: the stream still ends at
    # the deadline (plus a grace) with the 503's body as its last event, and the work stops once released
    gate = Gate(gemma)
    gate.passages_received.set()
    cfg = service_settings.model_copy(update={"request_timeout_s": 1.0})
    app = make_app(cfg, pipeline, generator=gate)
    with running(app) as url:
        events = read_stream(url, {"query": zh_question().text, "max_tokens": 32})
        gate.token_received.set()
        wait_for(lambda: 'cancelled_total{reason="deadline"} 1.0' in httpx.get(f"{url}/metrics").text,
                 "the held generation stopped at its next check")  # fmt: skip
        metrics = httpx.get(f"{url}/metrics").text
    names = [n for n, _ in events]  # a token, unless the prompt's evaluation alone outlasted the budget
    assert names[0] == "passages" and names[-1] == "error" and set(names[1:-1]) <= {"token"}, names
    assert events[-1][1]["error"] == "time_budget_exceeded" and "1 s is spent" in events[-1][1]["detail"]
    assert 'samelang_stream_errors_total{error="time_budget_exceeded"} 1.0' in metrics
