"""Request micro-batching: concurrent callers' inputs run as one forward pass.

Each HTTP request runs in a worker thread and asks for a few embeddings (one query) or a few
dozen scores (one /rerank). Run one by one, 32 concurrent /search requests cost 32 forward passes
of one short query each; gathered, they cost one pass over 32 queries, which on a CPU takes
little more than one. A single model thread also keeps the cores from being oversubscribed by
competing forward passes.

The gathering window opens when the first item arrives and closes after ``max_wait_ms`` or as
soon as ``max_items`` inputs are waiting, so a lone request waits at most ``max_wait_ms``.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from samelang.core import budget


@dataclass
class _Job:
    items: Sequence
    future: Future = field(default_factory=Future)


class MicroBatcher:
    """Thread-safe: ``submit(items)`` blocks until ``fn`` has run on a batch holding ``items``
    and returns exactly the rows of ``fn``'s output that belong to them, in their order.

    ``fn`` maps a list of inputs to an array with one row (or element) per input. An exception
    in ``fn`` is raised in every caller of that batch. ``on_batch(n_inputs, n_requests)`` is
    told each batch's size (metrics)."""

    def __init__(
        self,
        fn: Callable[[list], np.ndarray],
        max_wait_ms: float = 2.0,
        max_items: int = 64,
        name: str = "batcher",
        on_batch: Callable[[int, int], None] | None = None,
    ):
        if max_wait_ms < 0 or max_items < 1:
            raise ValueError("max_wait_ms must be >= 0 and max_items >= 1")
        self.fn, self.max_wait, self.max_items, self.on_batch = fn, max_wait_ms / 1000.0, max_items, on_batch
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"samelang-{name}", daemon=True)
        self._thread.start()

    def submit(self, items: Sequence) -> np.ndarray:
        if self._closed:
            raise RuntimeError("the micro-batcher is closed")
        if len(items) == 0:
            return np.asarray(self.fn([]))
        budget.check()  # a cancelled request adds no work
        job = _Job(list(items))
        self._queue.put(job)
        while True:  # the batch runs on; a caller whose request is cancelled stops waiting for it
            try:
                return job.future.result(timeout=0.1)
            except TimeoutError:
                budget.check()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout=10)

    # -- worker ------------------------------------------------------------------------------
    def _gather(self, first: _Job) -> tuple[list[_Job], bool]:
        jobs, n = [first], len(first.items)
        deadline = time.perf_counter() + self.max_wait
        while n < self.max_items:
            timeout = deadline - time.perf_counter()
            try:
                job = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
            n += len(job.items)
        return jobs, False

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            jobs, stop = self._gather(first)
            self._run(jobs)

    def _run(self, jobs: list[_Job]) -> None:
        inputs = [x for j in jobs for x in j.items]
        try:
            out = np.asarray(self.fn(inputs))
            if len(out) != len(inputs):
                raise RuntimeError(f"batched function returned {len(out)} rows for {len(inputs)} inputs")
        except BaseException as e:  # noqa: BLE001 - every waiting caller must be released
            for j in jobs:
                j.future.set_exception(e)
            return
        if self.on_batch is not None:
            self.on_batch(len(inputs), len(jobs))
        start = 0
        for j in jobs:
            j.future.set_result(out[start : start + len(j.items)])
            start += len(j.items)


class BatchedEncoder:
    """An encoder whose ``encode_queries`` calls of up to ``max_items`` texts go through a
    :class:`MicroBatcher` of its own; everything else is the wrapped encoder's.

    The batcher belongs to whoever wraps (the app, see :func:`micro_batched`), not to the encoder:
    two apps serving one loaded encoder each gather with their own window and report to their own
    metrics, and closing one app stops only its batcher."""

    def __init__(self, encoder, max_wait_ms: float, max_items: int, on_batch=None):
        self._inner = encoder
        self.batcher = MicroBatcher(encoder.encode_queries, max_wait_ms, max_items, "queries", on_batch)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def encode_queries(self, texts: list[str], progress: bool = False) -> np.ndarray:
        if 0 < len(texts) <= self.batcher.max_items:
            return self.batcher.submit(texts)
        return self._inner.encode_queries(texts, progress)  # a large batch gains nothing from waiting


class BatchedReranker:
    """A cross-encoder whose (query, document) pairs of concurrent requests, up to ``max_items``
    per call, go through a :class:`MicroBatcher` of its own (see :class:`BatchedEncoder`)."""

    def __init__(self, reranker, max_wait_ms: float, max_items: int, on_batch=None):
        self._inner = reranker
        self.batcher = MicroBatcher(reranker.score_pairs, max_wait_ms, max_items, "pairs", on_batch)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def score_pairs(self, pairs: list[tuple[str, str]], progress: bool = False) -> np.ndarray:
        if 0 < len(pairs) <= self.batcher.max_items and not progress:
            return self.batcher.submit(list(pairs))
        return self._inner.score_pairs(pairs, progress)

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        # the wrapped reranker's own ``score`` would call its own ``score_pairs``, past the batcher
        if not documents:
            return np.zeros(0, dtype=np.float32)
        return self.score_pairs([(query, d) for d in documents])


def micro_batched(pipeline, max_wait_ms: float, max_items: int, on_batch=None) -> tuple[object, list[MicroBatcher]]:
    """``pipeline`` with its encoder's queries and its cross-encoder's pairs micro-batched, and the
    new batchers (the caller closes them). ``on_batch(model, n_inputs, n_requests)`` is told each
    batch, ``model`` being ``"encoder"`` or ``"reranker"``. A reranker that scores with the served
    encoder (the bi-encoder cosine) gets the batched encoder, so its queries are gathered too and
    the pipeline still recognises it as the encoder's own."""
    changes: dict = {}
    batchers: list[MicroBatcher] = []

    def report(model: str):
        return None if on_batch is None else (lambda n_inputs, n_requests: on_batch(model, n_inputs, n_requests))

    encoder, reranker = pipeline.encoder, pipeline.reranker
    changes["encoder"] = BatchedEncoder(encoder, max_wait_ms, max_items, report("encoder"))
    batchers.append(changes["encoder"].batcher)
    if reranker.capabilities.scores_pairs:
        changes["reranker"] = BatchedReranker(reranker, max_wait_ms, max_items, report("reranker"))
        batchers.append(changes["reranker"].batcher)
    elif reranker.capabilities.scores_vectors and reranker.encoder is encoder:
        changes["reranker"] = copy.copy(reranker)
        changes["reranker"].encoder = changes["encoder"]
    return pipeline.replace(**changes), batchers
