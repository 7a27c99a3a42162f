"""Micro-batching: concurrent callers share forward passes and each gets exactly its own rows.

The unit tests use a plain function (plumbing: who gets which rows); the HTTP test runs 20
concurrent /search and /rerank requests against a real server over the real base model and
checks every response against the same request served alone.

How many model calls served the requests is made deterministic with a latch, not with timing: the
first call of the batched function blocks until the other requests are queued behind it, so they
are all waiting when the next window opens, whatever the load on the machine. The waits have
generous limits that only turn a hang into a failure."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from samelang.service.batching import BatchedEncoder, BatchedReranker, MicroBatcher, micro_batched
from tests.service.conftest import make_app, running

HANG = 120.0  # seconds: only a hang takes this long


def wait_until(condition, what: str) -> None:
    end = time.monotonic() + HANG
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


class Plug:
    """A batched function whose first call blocks until ``release()``: callers that submit while
    it blocks queue up and are gathered by the next window."""

    def __init__(self, fn):
        self.fn, self.calls, self._open, self._first = fn, [], threading.Event(), True

    def __call__(self, items):
        self.calls.append(list(items))
        if self._first:
            self._first = False
            assert self._open.wait(HANG), "never released"
        return self.fn(items)

    def plug(self, b: MicroBatcher) -> threading.Thread:
        """Occupy ``b``'s worker with a full batch (its window closes at once) that waits for ``release()``."""
        t = threading.Thread(target=b.submit, args=(["plug"] * b.max_items,), daemon=True)
        t.start()
        wait_until(lambda: len(self.calls) == 1, "the plug to reach the batched function")
        return t

    def release(self) -> None:
        self._open.set()


def rows(items):
    return np.array([[hash(x) % 1000, len(x)] for x in items])


def test_each_caller_gets_its_own_rows_in_order_in_one_gathered_call():
    n_items = sum(i % 5 + 1 for i in range(20))
    f = Plug(rows)
    b = MicroBatcher(f, max_wait_ms=60_000, max_items=n_items)  # the window closes on max_items, never on time
    plug = f.plug(b)

    def caller(i):
        items = [f"caller{i}-item{j}" for j in range(i % 5 + 1)]
        return items, b.submit(items)

    with ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(caller, i) for i in range(20)]
        wait_until(lambda: b._queue.qsize() == 20, "20 queued requests")
        f.release()
        results = [fut.result(timeout=HANG) for fut in futures]
    plug.join(HANG)
    for items, got in results:
        assert got.tolist() == rows(items).tolist()
    assert [len(c) for c in f.calls] == [n_items, n_items]  # the plug, then all 20 requests in one call
    b.close()


def test_an_error_reaches_every_caller_of_the_batch_and_the_batcher_lives_on():
    def fn(items):
        if "bad" in items:
            raise ValueError("cannot embed 'bad'")
        return np.arange(len(items))

    f = Plug(fn)
    b = MicroBatcher(f, max_wait_ms=60_000, max_items=3)
    plug = f.plug(b)
    with ThreadPoolExecutor(2) as pool:
        bad = pool.submit(b.submit, ["bad"])
        wait_until(lambda: b._queue.qsize() == 1, "the first request")
        ok = pool.submit(b.submit, ["ok", "fine"])
        wait_until(lambda: b._queue.qsize() == 2, "the second request")
        f.release()
        for fut in (bad, ok):  # one batch of ['bad', 'ok', 'fine']: both callers get its error
            with pytest.raises(ValueError, match="cannot embed"):
                fut.result(timeout=HANG)
    plug.join(HANG)
    assert f.calls[1:] == [["bad", "ok", "fine"]]
    b.max_wait = 0.0
    assert b.submit(["x"]).tolist() == [0]  # the worker survived the error
    b.close()


def test_max_items_closes_the_window_early():
    f = Plug(lambda xs: np.zeros(len(xs)))
    b = MicroBatcher(f, max_wait_ms=600_000, max_items=4)  # each window would last 10 minutes without the cap
    plug = f.plug(b)
    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(b.submit, [i, i]) for i in range(8)]
        wait_until(lambda: b._queue.qsize() == 8, "8 queued requests")
        f.release()
        for fut in futures:
            fut.result(timeout=HANG)
    plug.join(HANG)
    assert [len(c) for c in f.calls] == [4, 4, 4, 4, 4]
    b.close()


def test_micro_batched_wraps_the_models_and_leaves_the_pipeline_alone(pipeline):
    seen = []
    batched, batchers = micro_batched(pipeline, 0.0, 8, lambda *a: seen.append(a))
    try:
        assert isinstance(batched.encoder, BatchedEncoder) and len(batchers) == 1  # the cosine reranker has no pairs
        assert batched.reranker.encoder is batched.encoder  # the cosine reranker's queries are gathered too
        assert batched.reranker.kind == pipeline.reranker.kind and batched.encoder.info == pipeline.encoder.info
        assert pipeline.encoder is not batched.encoder and pipeline.reranker.encoder is pipeline.encoder
        q = ["Where does the Rhine flow?"]
        np.testing.assert_allclose(batched.encoder.encode_queries(q), pipeline.encoder.encode_queries(q), atol=1e-6)
        assert seen == [("encoder", 1, 1)]
    finally:
        for b in batchers:
            b.close()


def test_two_apps_over_one_encoder_each_have_their_own_window_and_metrics(service_settings, pipeline):
    """The batcher belongs to the app: the second app over the same loaded encoder does not inherit
    the first app's window, and each app's metrics count only its own requests."""
    slow = make_app(service_settings.model_copy(update={"batch_wait_ms": 7.0, "max_batch_items": 5}), pipeline)
    fast = make_app(service_settings.model_copy(update={"batch_wait_ms": 0.0, "max_batch_items": 9}), pipeline)
    with running(slow) as slow_url, running(fast) as fast_url:
        slow_b, fast_b = (a.state.handlers.pipeline.encoder.batcher for a in (slow, fast))
        assert (slow_b.max_wait, slow_b.max_items) == (0.007, 5) and (fast_b.max_wait, fast_b.max_items) == (0.0, 9)
        assert not hasattr(pipeline.encoder, "batcher")  # nothing was attached to the shared encoder
        with httpx.Client(timeout=HANG) as c:
            assert c.post(f"{fast_url}/search", json={"query": "Where does the Rhine flow?", "k": 3}).status_code == 200
            counts = [_batch_counts(c.get(f"{url}/metrics").text).get("encoder") for url in (slow_url, fast_url)]
    assert counts == [None, (1.0, 1.0)]  # one batch with one request, in the app that served it
    assert slow_b._closed and fast_b._closed  # each app closed its own batcher when it stopped


class Gate:
    """Wraps a model method: when armed, its first call waits until every one of ``expected``
    concurrent requests is either in that call or queued in the app's batcher, so the next call
    gathers all the rest. ``per_request`` inputs make one request (3 pairs for a /rerank here)."""

    def __init__(self, fn, expected: int, per_request: int):
        self.fn, self.expected, self.per_request = fn, expected, per_request
        self.armed, self.queued = False, None

    def __call__(self, items, progress: bool = False):
        if self.armed:
            self.armed = False
            here = len(items) // self.per_request
            wait_until(lambda: here + self.queued() >= self.expected, "the concurrent requests to queue")
        return self.fn(items, progress)


class GatedEncoder:
    def __init__(self, encoder, gate_args):
        self._inner, self.gate = encoder, Gate(encoder.encode_queries, *gate_args)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def encode_queries(self, texts, progress=False):
        return self.gate(texts, progress)


class GatedReranker:
    def __init__(self, reranker, gate_args):
        self._inner, self.gate = reranker, Gate(reranker.score_pairs, *gate_args)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def score_pairs(self, pairs, progress=False):
        return self.gate(pairs, progress)


@pytest.fixture(scope="module")
def batched_server(service_settings, pipeline, cross_encoder_reranker):
    cfg = service_settings.model_copy(update={"micro_batching": True, "batch_wait_ms": 20.0})
    encoder, reranker = GatedEncoder(pipeline.encoder, (10, 1)), GatedReranker(cross_encoder_reranker, (10, 3))
    app = make_app(cfg, pipeline, encoder=encoder, reranker=reranker)
    with running(app) as url:
        served = app.state.handlers.pipeline
        assert isinstance(served.encoder, BatchedEncoder) and isinstance(served.reranker, BatchedReranker)
        encoder.gate.queued = served.encoder.batcher._queue.qsize
        reranker.gate.queued = served.reranker.batcher._queue.qsize
        yield url, (encoder.gate, reranker.gate)


@pytest.fixture(scope="module")
def cross_encoder_reranker(samelang_home, served_cross_encoder):
    from samelang.core.models.cross_encoder import CrossEncoderReranker

    return CrossEncoderReranker(served_cross_encoder, home=samelang_home)


def test_twenty_concurrent_requests_each_get_their_own_result(batched_server):
    from samelang.corpora import load_xquad

    batched_server, gates = batched_server
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
        for gate in gates:
            gate.armed = True
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
    # the gate held the first call of each model until the other requests were queued: at most two
    # calls per model served the ten requests (the first window's, and one for all the rest)
    calls = {m: after[m][0] - before[m][0] for m in after}
    requests = {m: after[m][1] - before[m][1] for m in after}
    assert requests == {"encoder": 10, "reranker": 10}
    assert calls["encoder"] <= 2 and calls["reranker"] <= 2, calls
    assert not any(gate.armed for gate in gates)  # each gate did hold a first call


def _batch_counts(metrics_text: str) -> dict[str, tuple[float, float]]:
    """model -> (micro-batched calls, requests served) from the Prometheus text."""
    out: dict[str, list[float]] = {}
    for line in metrics_text.splitlines():
        if line.startswith("samelang_batch_requests_count{") or line.startswith("samelang_batch_requests_sum{"):
            name, value = line.rsplit(" ", 1)
            model = name.split('model="')[1].split('"')[0]
            out.setdefault(model, [0.0, 0.0])[0 if "_count" in name else 1] = float(value)
    return {m: (v[0], v[1]) for m, v in out.items()}
