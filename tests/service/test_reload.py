"""A running server sees `index add` and `index delete`: the new generation is served within seconds, without a restart,
while the old one stays readable for requests that started on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from samelang.corpora import Document, load_xquad
from samelang.indexes.writes import add_documents, build_index
from tests.service.conftest import make_app, running


def test_server_serves_a_new_generation(tmp_path, encoder, service_settings, pipeline, samelang_home):
    from samelang.indexes.index import open_index

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
        # `samelang index delete` (the CLI): the next generation is served without the document
        env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PYTHONPATH": str(Path(__file__).parents[2])}
        cmd = [sys.executable, "-m", "samelang", "index", "delete", str(out), "--ids", "fresh-1"]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1])["n_docs"] == 20
        deadline = time.monotonic() + 60
        while c.get("/ready").json()["documents"] != 20:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        hits = c.post("/search", json={"query": "When is the Zorblax festival?", "k": 20}).json()["hits"]
        assert len(hits) == 20 and "fresh-1" not in {h["id"] for h in hits}
