"""Hostile and careless clients against a real server: no 5xx from any input, bounded work that
stops when the client leaves, no exception text in a 500, probes without the key."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from samelang.corpora import load_xquad
from samelang.retrieval.limits import Limits
from tests.service.conftest import make_app, running


def _metric(client, name: str, **labels) -> float:
    """The value of one Prometheus sample (0 when absent)."""
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
        if not labels and line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    "route, body, field",
    [
        ("/search", {"query": "\ud800"}, "query"),
        ("/search", {"query": "\u200b\u200c"}, "query"),
        ("/search", {"query": "x", "k": True}, "k"),
        ("/search", {"query": "x", "k": "3"}, "k"),
        ("/search", {"query": "x", "rerank": 1}, "rerank"),
        ("/rerank", {"query": "q", "documents": ["ok", "\ud800x"]}, "documents[1].text"),
        ("/rerank", {"query": "q", "documents": [{"id": "\udfff", "text": "ok"}]}, "documents[0].id"),
        ("/rerank", {"query": "q", "documents": [{"text": "\u200b\u2060"}]}, "documents[0].text"),
        ("/diagnose", {"queries": [{"query": "x", "relevant": ["\ud800"]}]}, "queries[0].relevant[0]"),
        ("/diagnose", {"dataset": "xquad", "pair": "en-fr"}, "pair"),
        ("/diagnose", {"dataset": "xquad", "pair": "en-ja"}, "pair"),
        ("/answer", {"query": "x", "passages": 10, "max_tokens": 512}, "max_tokens"),
        ("/diagnose", {"dataset": "xquad", "pair": "en-zh", "split": "all", "rerank": True, "rerank_k": 100}, "split"),
        ("/diagnose", {"dataset": "xquad", "pair": "en-zh", "rerank": True, "rerank_k": 100}, "rerank_k"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(client, route, body, field):
    # json.dumps escapes a lone surrogate as \ud800, as a hostile client would send it (httpx's json=
    # cannot encode one at all)
    r = client.post(route, content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["error"] == "invalid_request" and err["request_id"] == r.headers["x-request-id"]
    assert field in err["detail"], err["detail"]


def test_a_surrogate_in_a_field_name_is_a_422(client):
    body = '{"query": "x", "\\ud800": 1, "documents": [{"text": "a", "\\udfff": 2}]}'
    for route in ("/search", "/rerank"):
        r = client.post(route, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"] == "invalid_request", r.text  # never a 500


def test_limits_name_their_numbers(client):
    d = client.post("/diagnose", json={"dataset": "xquad", "pair": "en-fr"}).json()["detail"]
    assert "en, ar, de" in d  # the languages XQuAD has
    d = client.post("/diagnose", json={"dataset": "xquad", "pair": "en-zh", "rerank": True, "rerank_k": 100})
    assert "748 queries x rerank_k 100 = 74800" in d.json()["detail"] and "at most 2000" in d.json()["detail"]
    d = client.post("/answer", json={"query": "x", "passages": 10, "max_tokens": 512}).json()["detail"]
    assert "10 x 512 = 5120" in d and "at most 1024" in d


def test_languages_are_normalised_everywhere(client):
    a = client.post("/diagnose", json={"dataset": "xquad", "pair": " EN-zh ", "k": 10}).json()
    assert a["aggregate"]["queries"] == 748 and set(a["per_query_lang"]) == {"en", "zh"}
    r = client.post("/search", json={"query": "museum", "k": 2, "langs": ["ZH"], "lang": " En "}).json()
    assert r["query_lang"] == "en" and {h["lang"] for h in r["hits"]} == {"zh"}


def test_a_500_leaks_nothing_and_closes_the_connection(service_settings, pipeline):
    class Broken:
        def __getattr__(self, name):
            return getattr(pipeline.encoder, name)

        def encode_queries(self, texts, progress=False):
            raise RuntimeError("secret path /etc/samelang/key")

    with running(make_app(service_settings, pipeline, encoder=Broken())) as url:
        r = httpx.post(f"{url}/search", json={"query": "x"}, headers={"x-request-id": "probe-1"}, timeout=60)
        assert r.status_code == 500
        assert r.json() == {
            "error": "internal_error",
            "detail": "internal error; the server log has it under request id probe-1",
            "request_id": "probe-1",
        }
        assert "secret" not in r.text and "RuntimeError" not in r.text
        assert r.headers["connection"] == "close" and r.headers["x-request-id"] == "probe-1"


def test_probes_without_the_key(service_settings, pipeline):
    cfg = service_settings.model_copy(update={"api_key": "k3y"})
    with running(make_app(cfg, pipeline)) as url, httpx.Client(base_url=url, timeout=60) as c:
        assert c.get("/ready").status_code == 200 and c.get("/health").status_code == 200
        assert c.get("/info").status_code == 401 and c.post("/admin/reload").status_code == 401


def _heavy_rerank() -> dict:
    paras = [d.text for d in load_xquad(["en", "de", "zh"], split="test").documents()]
    long = [(" ".join([p] * 8))[:19_000] for p in paras[:100]]
    return {"query": "Who was the first director of the museum?", "documents": long}


def test_a_disconnected_clients_work_stops(service_settings, pipeline):
    """The engine checks the request's budget between batches: once the client hangs up, the
    cancellation is counted and no request is left in progress (the worker thread returned)."""
    cfg = service_settings.model_copy(update={"max_body_bytes": 4_000_000})
    app = make_app(cfg, pipeline, limits=Limits(max_rerank_documents=100, max_document_chars=20000))
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        with pytest.raises(httpx.TimeoutException):
            c.post("/rerank", json=_heavy_rerank(), timeout=0.5)
        deadline = time.monotonic() + 120  # generous: a wait for an event, not a speed threshold
        while _metric(c, "samelang_work_cancelled_total", reason="disconnected") < 1:
            assert time.monotonic() < deadline, c.get("/metrics").text
            time.sleep(0.1)
        while _metric(c, "samelang_work_in_progress") > 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # the hang-up is not a server error
        assert _metric(c, "samelang_requests_total", route="/rerank", status="499") == 1
        assert _metric(c, "samelang_requests_total", route="/rerank", status="500") == 0


def test_a_spent_time_budget_is_a_503(service_settings, pipeline):
    cfg = service_settings.model_copy(update={"request_timeout_s": 0.2, "max_body_bytes": 4_000_000})
    with running(make_app(cfg, pipeline, limits=Limits(max_rerank_documents=100, max_document_chars=20000))) as url:
        r = httpx.post(f"{url}/rerank", json=_heavy_rerank(), timeout=120)
        assert r.status_code == 503 and r.json()["error"] == "time_budget_exceeded"
        assert "0.2 s" in r.json()["detail"]


def test_a_body_that_never_completes_gets_a_408(service_settings, pipeline):
    cfg = service_settings.model_copy(update={"body_timeout_s": 0.5})
    with running(make_app(cfg, pipeline)) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"query\": ")  # fmt: skip
            reply = b""
            while chunk := s.recv(4096):  # until the server closes the connection
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply


def test_openapi_states_the_limits(client):
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    docs = schemas["RerankRequest"]["properties"]["documents"]
    assert docs["maxItems"] == 20 and docs["items"]["oneOf"][0]["maxLength"] == 5000  # the test server's limits
    assert schemas["RerankDocument"]["properties"]["text"]["maxLength"] == 5000
    assert schemas["SearchRequest"]["properties"]["query"]["pattern"] == r"\S"
    assert "enum" in str(schemas["SearchRequest"]["properties"]["lang"])
    assert schemas["DiagnoseRequest"]["properties"]["pair"]["anyOf"][0]["pattern"]
    for path in ("/search", "/rerank", "/answer", "/diagnose"):
        codes = set(spec["paths"][path]["post"]["responses"])
        assert {"200", "400", "401", "408", "413", "422", "500", "503"} <= codes, (path, codes)
