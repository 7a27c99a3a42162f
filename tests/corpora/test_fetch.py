"""``samelang data fetch`` against a local HTTP server that serves repositories in GitHub's raw-file layout
(``<owner>/<name>/<commit>/<path>``): an empty store is filled and ``samelang data info`` lists every source;
a file with the wrong bytes or a missing file leaves its source out of the store, named with its fix."""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import replace
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from samelang.corpora import store as store_module
from samelang.corpora.fetch import fetch_sources, file_url
from samelang.corpora.store import CorpusStore


@pytest.fixture()
def raw_server(tmp_path):
    """A quiet static server over ``tmp_path / "raw"``; yields (root folder, base URL)."""
    root = tmp_path / "raw"
    root.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _publish(root, source, files, skip=(), corrupt=()):
    for f in source.files:
        if f.path in skip:
            continue
        target = root / source.repo / source.commit / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        data = files[source.name][f.path]
        target.write_bytes(data[:-1] + b"?" if f.path in corrupt else data)


def test_fetch_fills_an_empty_store_that_data_info_then_lists(raw_server, fake_sources, tmp_path, monkeypatch):
    from samelang.training import corpus
    from samelang.training.corpus import DataInfoOptions, info_report

    root, url = raw_server
    fake, files = fake_sources
    for s in fake:
        _publish(root, s, files)
    monkeypatch.setattr(store_module, "SOURCES", fake)
    monkeypatch.setattr(corpus, "SOURCES", fake)
    store = CorpusStore(tmp_path / "store")
    said = []
    report = fetch_sources(fake, store, url, tmp_path / "cache", log=said.append)
    assert all(v.startswith("fetched ") for v in report.values()) and set(report) == {s.name for s in fake}
    assert [s.name for s in store.present()] == [s.name for s in fake]
    first = fake[0].files[0]
    assert store.read(fake[0], first.path) == files[fake[0].name][first.path]
    filtered = {"model": "m", "dropped": {}, "calibration": {"threshold": 0.6, "start": 0.85, "versions": 2880,
                "caught_pct": 100.0, "caught_at_start_pct": 40.0, "unrelated_over_threshold_pct": 20.0}}  # fmt: skip
    (store.root / "contamination.json").write_text(json.dumps(filtered))  # `samelang data filter`'s (tested apart)
    table = info_report(DataInfoOptions(corpora=store.root, home=tmp_path))
    assert all(s.name in table for s in fake)
    assert fetch_sources(fake, store, url, tmp_path / "cache")[fake[0].name] == "already in the store"


def test_a_wrong_or_missing_file_leaves_its_source_out_and_says_why(raw_server, fake_sources, tmp_path):
    root, url = raw_server
    fake, files = fake_sources
    good, bad, gone = fake[:3]
    _publish(root, good, files)
    _publish(root, bad, files, corrupt={bad.files[0].path})
    _publish(root, gone, files, skip={gone.files[-1].path})
    store = CorpusStore(tmp_path / "store")
    report = fetch_sources([good, bad, gone], store, url, tmp_path / "cache", log=lambda *a: None)
    assert report[good.name].startswith("fetched ")
    assert report[bad.name].startswith(f"not fetched: {file_url(url, bad, bad.files[0])}: not the declared file")
    assert "check samelang/corpora/sources.json" in report[bad.name]
    assert report[gone.name].startswith(f"not fetched: {file_url(url, gone, gone.files[-1])}: 404")
    assert store.has(good) and not (store.root / bad.name).exists() and not (store.root / gone.name).exists()
    # the network absent: a clear error that names the offline way
    closed = replace(gone, repo="x/y")
    report = fetch_sources([closed], store, "http://127.0.0.1:9", tmp_path / "cache", log=lambda *a: None)
    assert "cannot download" in report[closed.name] and "samelang data import --snapshots DIR" in report[closed.name]
