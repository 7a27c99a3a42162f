"""The front process's app (samelang/service/front.py) in front of a real server app on a Unix socket, both
served by uvicorn in threads here: past the bound a 429 at once in the route's dialect, with no model work and
nothing sent on; the probes and /metrics answered while the model work is held; everything else passed on
and its answer brought back as sent (status, body, the request id once); a client that leaves while its
request waits makes the server drop it. The two processes of `samelang serve`: test_cli.py."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx

from samelang.service.api.prometheus import Metrics
from samelang.service.api.server import serve_in_thread
from samelang.service.front import Front, ServerLink, model_work_paths
from tests.service.api.test_admission import _HeldEncoder
from tests.service.conftest import make_app


class _Alive:
    """The server process as :class:`ServerLink` reads it: here a thread of this process, always alive."""

    exitcode = None

    def is_alive(self) -> bool:
        return True


@contextmanager
def _front_over_a_held_server(settings, pipeline, encoder, tmp_path, queued: int):
    """A server app whose model work waits on a gate (one turn, ``queued`` places) on a Unix socket, and the
    front over it on a loopback port: yields (the front's URL, the front, the server app, the gate's encoder)."""
    cfg = settings.model_copy(update={"max_concurrent_requests": 1, "max_queued_requests": queued,
                                      "micro_batching": False})  # fmt: skip
    held = _HeldEncoder(encoder)
    app = make_app(cfg, pipeline, encoder=held)
    uds = str(tmp_path / "server.sock")
    with serve_in_thread(app, uds=uds):
        front = Front(cfg, ServerLink(_Alive(), uds, None), Metrics())
        with serve_in_thread(front) as url:
            yield url, front, app, held


def _wait(condition, what: str, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s  # bounds a broken server only
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_the_front_answers_429_and_probes_itself_and_passes_the_rest_on(service_settings, pipeline, encoder, tmp_path):
    with _front_over_a_held_server(service_settings, pipeline, encoder, tmp_path, queued=1) as (url, front, app, held):
        with ThreadPoolExecutor(4) as pool:
            assert {"/search", "/answer", "/v1/embeddings", "/embed", "/rerank"} <= front.server.paths
            assert "/admin/reload" not in front.server.paths  # no 429 documented: not model work
            ids = [f"held-{i}" for i in range(2)]
            admitted = [pool.submit(httpx.post, f"{url}/search", json={"query": "Who won?", "k": 3},
                                    headers={"x-request-id": rid}, timeout=60) for rid in ids]  # fmt: skip
            _wait(lambda: held.now == 1 and app.state.admission.queued == 1, "one turn taken, one request queued")
            t0 = time.perf_counter()
            over = httpx.post(f"{url}/search", json={"query": "one too many"}, timeout=30)
            openai = httpx.post(f"{url}/v1/embeddings", json={"model": "m", "input": ["x"]}, timeout=30)
            tei = httpx.post(f"{url}/embed", json={"inputs": "x"}, timeout=30)
            assert time.perf_counter() - t0 < 30  # (bounds a hang only; the bench times the 429s)
            probes = [httpx.get(f"{url}{p}", timeout=30) for p in ("/health", "/ready", "/metrics")]
            assert held.calls == 1 and front.inside == 2  # the 429s did no model work and were not sent on
            held.gate.set()
            done = [f.result() for f in admitted]
    assert over.status_code == 429 and over.headers["retry-after"] == "1", over.text
    assert over.json()["error"] == "overloaded" and "1 requests run model work and 1 wait" in over.json()["detail"]
    assert openai.status_code == 429 and openai.json()["error"]["type"] == "overloaded"  # OpenAI's shape
    assert tei.status_code == 429 and tei.json()["error_type"] == "overloaded"  # TEI's
    assert [p.status_code for p in probes] == [200, 200, 200]
    assert probes[1].json()["documents"] == pipeline.index.documents  # the server's own /ready, as last probed
    assert 'samelang_rejected_total{path="/search"} 1.0' in probes[2].text
    assert [r.status_code for r in done] == [200, 200] and all(r.json()["hits"] for r in done)
    # the server's answer as it sent it, with the client's request id once
    assert [r.headers.get_list("x-request-id") for r in done] == [[rid] for rid in ids]
    assert front.inside == 0


def test_a_client_that_leaves_is_dropped_by_the_server_and_bad_input_is_the_servers_4xx(
    service_settings, pipeline, encoder, tmp_path
):
    with _front_over_a_held_server(service_settings, pipeline, encoder, tmp_path, queued=2) as (url, front, app, held):
        first = threading.Thread(target=httpx.post, args=(f"{url}/search",),
                                 kwargs={"json": {"query": "first"}, "timeout": 60})  # fmt: skip
        first.start()
        _wait(lambda: held.now == 1, "the one turn taken")
        try:  # queued behind it, then the client gives up
            httpx.post(f"{url}/search", json={"query": "leaves"}, timeout=0.5)
        except httpx.TimeoutException:
            pass
        _wait(lambda: app.state.admission.queued == 0 and front.inside == 1, "the request that left dropped")
        held.gate.set()
        first.join(60)
        bad = httpx.post(f"{url}/search", json={"query": "x", "k": 0}, timeout=30)
        junk = httpx.post(f"{url}/search", content=b"\xff\xfe", headers={"content-type": "application/json"})
    assert held.calls == 1  # the request whose client left never reached the model
    assert bad.status_code == 422 and "k" in bad.text  # the server's validation, brought back as it was
    assert junk.status_code == 400 and junk.json()["error"] == "invalid_encoding"


def test_model_work_paths_are_the_post_routes_that_document_a_429():
    schema = {"paths": {"/search": {"post": {"responses": {"200": {}, "429": {}}}}, "/health": {"get": {}},
                        "/admin/reload": {"post": {"responses": {"200": {}}}}}}  # fmt: skip
    assert model_work_paths(schema) == {"/search"}
