"""A running server sees `index add`: the new generation is served within seconds, without a restart,
while the old one stays readable for requests that started on it."""

from __future__ import annotations

import time

import httpx

from indexes.corpora import Document, load_xquad
from indexes.index import add_documents, build_index
from tests.service.conftest import make_app, running


def test_server_serves_a_new_generation(tmp_path, encoder, service_settings, pipeline):
    from indexes.index import open_index

    docs = load_xquad(["en"], split="test").documents()[:20]
    out = tmp_path / "live"
    build_index(out, docs, encoder.encode_passages, encoder.info)
    cfg = service_settings.model_copy(update={"index": out, "index_reload_s": 0.2})
    app = make_app(cfg, pipeline, index=open_index(out, encoder.info))
    new = Document("fresh-1", "The Zorblax festival of light is held every spring in Ulaanbaatar.", "en", None, {})
    with running(app) as url, httpx.Client(base_url=url, timeout=60) as c:
        assert c.get("/ready").json()["documents"] == 20
        old = app.state.handlers.pipeline  # what a request in flight holds
        add_documents(out, [new], encoder.encode_passages, encoder.info)
        deadline = time.monotonic() + 60  # the watcher polls every 0.2 s; this only bounds a broken one
        while c.get("/ready").json()["documents"] != 21:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        hits = c.post("/search", json={"query": "When is the Zorblax festival?", "k": 1}).json()["hits"]
        assert hits[0]["id"] == "fresh-1"
        assert c.get("/info").json()["index"]["generation"] == "gen-000002"
        # the request that started on generation 1 still reads it: its files were not deleted
        assert (out / "gen-000001").exists() and old.index.docs.get_rows([0])[0].id == docs[0].id
        # the explicit reload says there is nothing newer
        assert c.post("/admin/reload").json() == {"generation": "gen-000002", "documents": 21, "reloaded": False}
