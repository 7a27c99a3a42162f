"""Micro-batching: concurrent callers share forward passes and each gets exactly its own rows.

The unit tests use a plain function (plumbing: who gets which rows); the HTTP test runs 20
concurrent /search and /rerank requests against a real server over the real base model and
checks every response against the same request served alone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from service.batching import MicroBatcher
from tests.service.conftest import make_app, running


def test_each_caller_gets_its_own_rows_in_order():
    calls = []

    def fn(items):
        calls.append(len(items))
        return np.array([[hash(x) % 1000, len(x)] for x in items])

    b = MicroBatcher(fn, max_wait_ms=50, max_items=1000)
    barrier = threading.Barrier(20)

    def caller(i):
        items = [f"caller{i}-item{j}" for j in range(i % 5 + 1)]
        barrier.wait()
        return items, b.submit(items)

    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(caller, range(20)))
    for items, rows in results:
        assert rows.tolist() == fn(items).tolist()
    calls = calls[:-20]  # drop the reference calls made above
    assert sum(calls) == sum(i % 5 + 1 for i in range(20)) and len(calls) < 20  # gathered: fewer passes
    b.close()


def test_an_error_reaches_every_caller_of_the_batch_and_the_batcher_lives_on():
    def fn(items):
        if "bad" in items:
            raise ValueError("cannot embed 'bad'")
        return np.arange(len(items))

    b = MicroBatcher(fn, max_wait_ms=30)
    with ThreadPoolExecutor(2) as pool:
        f1, f2 = pool.submit(b.submit, ["bad"]), pool.submit(b.submit, ["ok", "fine"])
        with pytest.raises(ValueError, match="cannot embed"):
            f1.result()
        try:
            assert f2.result().tolist() == [0, 1]  # served alone
        except ValueError:
            pass  # or in the same batch as 'bad', then it shares the error
    assert b.submit(["x"]).tolist() == [0]
    b.close()


def test_max_items_closes_the_window_early():
    sizes = []
    b = MicroBatcher(lambda xs: sizes.append(len(xs)) or np.zeros(len(xs)), max_wait_ms=10_000, max_items=4)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: b.submit([i, i]), range(8)))  # would wait 10 s per batch without the cap
    assert sum(sizes) == 16 and max(sizes) <= 5
    b.close()


@pytest.fixture(scope="module")
def batched_server(service_settings, pipeline, cross_encoder_reranker):
    cfg = service_settings.model_copy(update={"micro_batching": True, "batch_wait_ms": 20.0})
    with running(make_app(cfg, pipeline, reranker=cross_encoder_reranker)) as url:
        yield url


@pytest.fixture(scope="module")
def cross_encoder_reranker(samelang_home):
    from service.models.registry import LAMAR_RERANKER
    from service.models.reranker import CrossEncoderReranker

    return CrossEncoderReranker(LAMAR_RERANKER, home=samelang_home)


def test_twenty_concurrent_requests_each_get_their_own_result(batched_server):
    from indexes.corpora import load_xquad

    x = load_xquad(["en", "zh"], split="test")
    paragraphs = [d.text[:300] for d in x.documents()]
    questions = [q.text for q in x.questions]
    rerank = [
        {
            "query": questions[i],
            "documents": [{"id": f"r{i}-d{j}", "text": paragraphs[(7 * i + j) % len(paragraphs)]} for j in range(3)],
        }
        for i in range(10)
    ]
    search = [{"query": questions[100 + i], "k": 5} for i in range(10)]
    jobs = [("/rerank", b) for b in rerank] + [("/search", b) for b in search]

    with httpx.Client(base_url=batched_server, timeout=300) as c:
        alone = [c.post(path, json=body).json() for path, body in jobs]  # one at a time: the reference
        before = _batch_counts(c.get("/metrics").text)
        barrier = threading.Barrier(len(jobs))

        def call(job):
            barrier.wait()
            return c.post(job[0], json=job[1])

        with ThreadPoolExecutor(len(jobs)) as pool:
            together = list(pool.map(call, jobs))
        after = _batch_counts(c.get("/metrics").text)

    for (path, body), ref, resp in zip(jobs, alone, together):
        assert resp.status_code == 200, resp.text
        got = resp.json()
        if path == "/rerank":
            assert [r["id"] for r in got["results"]] == [r["id"] for r in ref["results"]]
            assert {r["id"].split("-")[0] for r in got["results"]} == {body["documents"][0]["id"].split("-")[0]}
            assert np.allclose([r["score"] for r in got["results"]], [r["score"] for r in ref["results"]], atol=1e-4)
        else:
            assert [h["id"] for h in got["hits"]] == [h["id"] for h in ref["hits"]]
            assert np.allclose([h["score"] for h in got["hits"]], [h["score"] for h in ref["hits"]], atol=1e-4)
    # the 20 requests took fewer model calls than requests: they were gathered
    calls = {m: after[m][0] - before[m][0] for m in after}
    requests = {m: after[m][1] - before[m][1] for m in after}
    assert requests == {"encoder": 10, "reranker": 10}
    assert calls["encoder"] < 10 and calls["reranker"] < 10, calls


def _batch_counts(metrics_text: str) -> dict[str, tuple[float, float]]:
    """model -> (micro-batched calls, requests served) from the Prometheus text."""
    out: dict[str, list[float]] = {}
    for line in metrics_text.splitlines():
        if line.startswith("samelang_batch_requests_count{") or line.startswith("samelang_batch_requests_sum{"):
            name, value = line.rsplit(" ", 1)
            model = name.split('model="')[1].split('"')[0]
            out.setdefault(model, [0.0, 0.0])[0 if "_count" in name else 1] = float(value)
    return {m: (v[0], v[1]) for m, v in out.items()}
