"""Bad input gets a clear JSON 4xx naming the field and the limit; never a 500 or a hang."""

from __future__ import annotations

import pytest

from tests.service.conftest import make_app, running  # noqa: F401  (helpers)


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"query": "   "}, "query", "empty"),
        ({"query": ""}, "query", "empty"),
        ({"query": "x", "k": 0}, "k", "greater than or equal to 1"),
        ({"query": "x", "k": 1001}, "k", "less than or equal to 1000"),
        ({"query": "x", "lang": "klingon"}, "lang", "unknown language code"),
        ({"query": "x", "langs": ["en", "qq"]}, "langs[1]", "unknown language code"),
        ({"query": "x" * 2001}, "query", "at most 2000"),
        ({"k": 3}, "query", "required"),
        ({"query": "x", "extra": 1}, "extra", "not permitted"),
    ],
)
def test_search_validation(client, body, field, words):
    r = client.post("/search", json=body)
    assert r.status_code == 422
    err = r.json()
    assert err["error"] == "invalid_request"
    assert err["detail"].startswith(field + ":") or f"; {field}:" in err["detail"]
    assert words in err["detail"]


def test_rerank_limits(client):
    r = client.post("/rerank", json={"query": "q", "documents": ["d"] * 21})
    assert r.status_code == 422 and "documents" in r.json()["detail"] and "at most 20" in r.json()["detail"]
    r = client.post("/rerank", json={"query": "q", "documents": ["ok", "x" * 5001]})
    assert r.status_code == 422 and "documents[1].text" in r.json()["detail"] and "at most 5000" in r.json()["detail"]
    r = client.post("/rerank", json={"query": "q", "documents": []})
    assert r.status_code == 422 and "documents" in r.json()["detail"]
    r = client.post("/answer", json={"query": "q", "k": 3, "rerank_k": 5})
    assert r.status_code == 422 and "rerank_k" in r.json()["detail"]


def test_rerank_has_no_request_level_lang(client):
    """It could not change a score (see ``RerankRequest``): refused by name, not silently ignored."""
    r = client.post("/rerank", json={"query": "q", "documents": ["d"], "lang": "en"})
    assert r.status_code == 422 and r.json()["detail"] == "lang: Extra inputs are not permitted"
    r = client.post("/rerank", json={"query": "q", "documents": [{"text": "d", "lang": "en"}]})
    assert r.status_code == 200 and r.json()["results"][0]["lang"] == "en"


def test_transport_level_errors(client):
    r = client.post("/search", content=b'{"query": ', headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"] == "malformed_json"
    r = client.post(
        "/search", content='{"query": "café"}'.encode("latin-1"), headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"] == "invalid_encoding"
    big = b'{"query": "' + b"a" * 200_000 + b'"}'
    r = client.post("/search", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "100000 bytes" in r.json()["detail"]

    def chunks():  # no content-length: the limit still holds while streaming
        yield b'{"query": "'
        for _ in range(30):
            yield b"a" * 10_000

    r = client.post("/search", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = client.get("/nope")
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_api_key(service_settings, pipeline):
    import httpx

    cfg = service_settings.model_copy(update={"api_key": "s3cret"})
    with running(make_app(cfg, pipeline)) as url, httpx.Client(base_url=url, timeout=60) as c:
        assert c.get("/health").status_code == 200
        r = c.post("/search", json={"query": "x"})
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/info", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = c.post("/search", json={"query": "x", "k": 1}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and len(ok.json()["hits"]) == 1
