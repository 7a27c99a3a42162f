"""Admission control: a bound on the requests running model work and on those waiting; past it a 429 at
once, with Retry-After, in the shape each dialect's clients read; a waiting request whose client left, or a
server that is closing, takes no turn; /health never waits behind model work."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from samelang.core.budget import Cancelled
from samelang.service.api.admission import Admission, Overloaded, overloaded_body
from samelang.service.api.prometheus import Metrics
from tests.service.conftest import make_app, running


class _Request:
    """What :meth:`Admission.enter` reads of a request: its path and whether its client is still there."""

    def __init__(self, path: str = "/search"):
        self.url = type("U", (), {"path": path})()
        self.gone = False

    async def is_disconnected(self) -> bool:
        return self.gone


def test_turns_queue_and_overload_in_order():
    async def scenario():
        metrics = Metrics()
        adm = Admission(1, 1, metrics)
        first = await adm.enter(_Request())
        waiting = asyncio.ensure_future(adm.enter(_Request()))
        await asyncio.sleep(0.1)
        assert not waiting.done() and adm.queued == 1
        with pytest.raises(Overloaded):  # at once: nothing awaited, nothing queued
            await adm.enter(_Request("/v1/embeddings"))
        assert adm.queued == 1 and adm.running == 1
        assert metrics.rejected.labels("/v1/embeddings")._value.get() == 1
        first.release()
        first.release()  # once only
        second = await asyncio.wait_for(waiting, 1)
        assert adm.running == 1 and adm.queued == 0
        # a waiting client that leaves takes no turn
        leaving = _Request()
        gone = asyncio.ensure_future(adm.enter(leaving))
        await asyncio.sleep(0.1)
        leaving.gone = True
        with pytest.raises(Cancelled) as e:
            await asyncio.wait_for(gone, 1)
        assert e.value.reason == "disconnected"
        assert adm.queued == 0 and adm.running == 1
        # closing: the queue empties at once, nothing new comes in
        closing = asyncio.ensure_future(adm.enter(_Request()))
        await asyncio.sleep(0.1)
        adm.close()
        with pytest.raises(Cancelled, match="shutting down"):
            await asyncio.wait_for(closing, 1)
        with pytest.raises(Cancelled, match="shutting down"):
            await adm.enter(_Request())
        second.release()
        assert adm.running == 0

    asyncio.run(scenario())


def test_each_dialect_gets_its_own_429_shape():
    assert overloaded_body("/v1/embeddings", "busy", "r")["error"]["type"] == "overloaded"
    assert overloaded_body("/v2/rerank", "busy", "r")["message"] == "busy"
    assert overloaded_body("/embed", "busy", "r") | {} == {"error": "busy", "error_type": "overloaded",
                                                          "detail": "busy", "request_id": "r"}  # fmt: skip
    assert overloaded_body("/rerank", "busy", "r")["error_type"] == "overloaded"
    assert overloaded_body("/search", "busy", "r") == {"error": "overloaded", "detail": "busy", "request_id": "r"}


class _HeldEncoder:
    """The served encoder behind a gate: each query batch waits until the test opens it (at most 60 s), so that
    the first requests hold their turns while the rest of a burst arrives, however a busy machine spreads
    the arrivals; it counts the calls and the most that ever ran at once."""

    def __init__(self, encoder):
        self._encoder, self._lock, self.gate = encoder, threading.Lock(), threading.Event()
        self.calls = self.now = self.most = 0

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def encode_queries(self, texts, progress=False):
        with self._lock:
            self.calls, self.now = self.calls + 1, self.now + 1
            self.most = max(self.most, self.now)
        self.gate.wait(60)
        try:
            return self._encoder.encode_queries(texts, progress)
        finally:
            with self._lock:
                self.now -= 1


def _half_sent_search(url: str) -> bytes:
    """A POST /search whose headers promise 100 bytes of body of which 10 are sent: what comes back."""
    import socket

    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                     b"content-length: 100\r\n\r\n" + b'{"query": ')  # fmt: skip
        return sock.recv(65536)


def test_a_burst_gets_200s_and_429s_that_did_no_model_work_while_health_answers(service_settings, pipeline, encoder):
    """Two turns and three places in the queue: of 32 requests at once, 5 are admitted and 27 get a 429 that did
    no model work; one more, its body still on the way, gets its 429 before the body is read (a 408 would say
    it waited). The timings (every 429 within 50 ms, /health's p99) are the bench's, not a unit test's."""
    cfg = service_settings.model_copy(update={"max_concurrent_requests": 2, "max_queued_requests": 3,
                                              "micro_batching": False, "body_timeout_s": 5.0})  # fmt: skip
    held = _HeldEncoder(encoder)
    app = make_app(cfg, pipeline, encoder=held)
    health: list[int] = []
    with running(app) as url:
        clients = [httpx.Client(base_url=url, timeout=90) for _ in range(32)]
        for c in clients:
            c.get("/health")
        rejected = threading.Semaphore(0)

        def search(i):
            r = clients[i].post("/search", json={"query": f"Who won the game {i}?", "k": 3})
            if r.status_code == 429:
                rejected.release()
            return r

        with ThreadPoolExecutor(32) as pool:
            futures = [pool.submit(search, i) for i in range(32)]
            for _ in range(27):  # every request past the bound is answered while the turns are held
                assert rejected.acquire(timeout=60)
            with httpx.Client(base_url=url, timeout=10) as c:
                health += [c.get("/health").status_code for _ in range(5)]  # the model work is still held
            assert held.now == 2 and app.state.admission.queued == 3
            half = _half_sent_search(url)  # answered before its body is read: a 429, not the body's 408
            held.gate.set()
            results = [f.result() for f in futures]
        for c in clients:
            c.close()
        metrics = httpx.get(f"{url}/metrics").text
        info = httpx.get(f"{url}/info").json()
    codes = [r.status_code for r in results]
    assert codes.count(200) == 5 and codes.count(429) == 27, codes
    assert held.calls == 5 and held.most == 2  # a 429 did no model work; never more than 2 at once
    assert all(r.headers["retry-after"] == "1" and r.json()["error"] == "overloaded" for r in results if
               r.status_code == 429)  # fmt: skip
    assert health == [200] * 5
    assert half.startswith(b"HTTP/1.1 429") and b'"error":"overloaded"' in half.replace(b" ", b""), half
    assert 'samelang_rejected_total{path="/search"} 28.0' in metrics
    assert "samelang_queue_depth" in metrics and "samelang_queued_seconds_bucket" in metrics
    assert info["limits"]["concurrent_requests"] == 2 and info["limits"]["queued_requests"] == 3


def test_the_clients_read_their_429(service_settings, pipeline, encoder):
    """OpenAI's SDK raises its RateLimitError, huggingface_hub's TEI client an HTTP 429, each with the message."""
    import openai
    from huggingface_hub import InferenceClient
    from huggingface_hub.errors import HfHubHTTPError

    cfg = service_settings.model_copy(update={"max_concurrent_requests": 1, "max_queued_requests": 0,
                                              "micro_batching": False})  # fmt: skip
    held = _HeldEncoder(encoder)
    app = make_app(cfg, pipeline, encoder=held)
    with running(app) as url:
        hold = threading.Thread(target=lambda: httpx.post(f"{url}/search", json={"query": "q"}, timeout=30))
        hold.start()
        deadline = time.monotonic() + 60  # bounds a broken server only
        while held.now < 1:  # the one turn is taken
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(openai.RateLimitError, match="overloaded"):
            openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0).embeddings.create(
                model="m", input=["x"], encoding_format="float")  # fmt: skip
        with pytest.raises(HfHubHTTPError) as e:
            InferenceClient(model=url).feature_extraction("x")
        assert e.value.response.status_code == 429
        held.gate.set()
        hold.join()


@pytest.mark.slow  # a real `samelang serve` process, started and stopped (~1 min on 2 cores)
def test_sigterm_after_a_burst_drains_and_exits(small_index, base_model_path, samelang_home, tmp_path):
    """Right after a burst (long /diagnose work in flight, searches queued and refused), SIGTERM: nothing more
    is admitted, every request gets an answer (200, 429 or 503, never a hang), and the process exits within
    10 s (the issue's bound for an operator's restart)."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.service.conftest import free_port

    port = free_port()
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PYTHONPATH": str(Path(__file__).parents[3])}
    cmd = [sys.executable, "-m", "samelang", "serve", "--index", str(small_index), "--model", str(base_model_path),
           "--reranker", "cosine", "--generator", "none", "--port", str(port), "--max-concurrent-requests", "2",
           "--max-queued-requests", "4", "--no-micro-batching"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600  # bounds a start that hangs (ONNX exports on a cold cache)
        while True:
            assert proc.poll() is None and time.monotonic() < deadline
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)

        def call(i):
            body = {"sample": 200, "seed": i} if i < 2 else {"query": f"Who won game {i}?", "k": 3}
            try:
                return httpx.post(f"{url}/{'diagnose' if i < 2 else 'search'}", json=body, timeout=30).status_code
            except httpx.TransportError:
                return "closed"

        with ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(call, i) for i in range(12)]
            time.sleep(0.5)  # the diagnoses run, the searches queue or are refused
            proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            proc.wait(timeout=30)
            took = time.monotonic() - stopped
            codes = [f.result(timeout=30) for f in futures]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 10, took
    assert set(codes) <= {200, 429, 503, "closed"}, codes  # an answer for each, or a connection closed: no hang
