"""What the pipeline evaluations share to stay fast and honest: an encoder whose vectors are computed
once per text (the pipeline calls it exactly as it calls the encoder), a cross-encoder whose scores are
kept on disk, and percentile-bootstrap intervals of a metric's mean."""

from __future__ import annotations

import hashlib
import io
import statistics
import time
from pathlib import Path

import numpy as np

from samelang.core.models.contracts import Capabilities
from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.runtime.precision import EngineOptions
from samelang.evaluation.reranker import score_identity
from samelang.primitives.atomic import atomic_write_bytes
from samelang.retrieval.options import SearchOptions

SCORE_CACHE_VERSION = "pipeline-scores-v1"  # bump when what a cached score means changes


def bootstrap_ci(values: np.ndarray, n: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean (in the values' units)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n, v.size))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def search_p50_ms(pipe, queries: list[str], k: int) -> float:
    """p50 ms of ``pipe.search`` (a :class:`~samelang.retrieval.pipeline.Pipeline` with the real models:
    nothing looked up), one search at a time over ``queries``, after one warm-up search."""
    pipe.search(queries[0], SearchOptions(k=k))
    times = []
    for q in queries:
        t0 = time.perf_counter()
        pipe.search(q, SearchOptions(k=k))
        times.append(1000 * (time.perf_counter() - t0))
    return float(statistics.median(times))


class MemoEncoder:
    """An encoder whose query and passage vectors are looked up (``known``: ``("query" | "passage",
    text) -> vector``, computed once, by the same encoder, in batches); a text it does not know is
    encoded by the model itself. The pipeline calls it exactly as it calls the encoder."""

    def __init__(self, encoder, known: dict[tuple[str, str], np.ndarray]):
        self._encoder, self._known = encoder, known

    def __getattr__(self, name):
        return getattr(self._encoder, name)

    def _look(self, kind: str, texts: list[str], encode) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (kind, t) not in self._known]
        if missing:
            for t, v in zip(missing, encode(missing)):
                self._known[(kind, t)] = v
        if not texts:
            return np.zeros((0, self._encoder.dim), np.float32)
        return np.stack([self._known[(kind, t)] for t in texts]).astype(np.float32)

    def encode_queries(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._look("query", texts, self._encoder.encode_queries)

    def encode_passages(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._look("passage", texts, self._encoder.encode_passages)


class CachedReranker:
    """A cross-encoder whose (query, document) scores are kept on disk under its fingerprint,
    precision and :data:`SCORE_CACHE_VERSION`; misses are scored by the model itself."""

    capabilities = Capabilities()  # one query's documents at a time, from the cache or the model

    def __init__(self, reranker, cache_file: Path | None):
        self._reranker, self.cache_file = reranker, cache_file
        self.name, self.kind, self.fingerprint = reranker.name, reranker.kind, reranker.fingerprint
        self._scores: dict[str, float] = {}
        self.scored = 0
        if cache_file and Path(cache_file).exists():
            z = np.load(cache_file)
            self._scores = dict(zip(z["keys"].tolist(), z["values"].tolist()))

    @classmethod
    def open(cls, path: Path, home: Path, precision: str = "auto", cache: bool = True) -> CachedReranker:
        """The cross-encoder of folder ``path`` with its scores kept in ``home``'s cache (one file
        per :func:`score_identity` and version: every evaluation that reranks shares it)."""
        ce = CrossEncoderReranker(path, home=home, options=EngineOptions(precision=precision))
        key = hashlib.sha256(f"{score_identity(ce)}|{SCORE_CACHE_VERSION}".encode()).hexdigest()[:20]
        return cls(ce, home / "cache" / f"pipeline-scores-{key}.npz" if cache else None)

    @property
    def path(self):
        return self._reranker.path

    @property
    def model(self):
        """The cross-encoder itself (what a latency measurement must run: nothing looked up)."""
        return self._reranker

    @staticmethod
    def _key(query: str, doc: str) -> str:
        return hashlib.sha256(f"{query}\0{doc}".encode()).hexdigest()[:32]

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        keys = [self._key(query, d) for d in documents]
        todo = [i for i, k in enumerate(keys) if k not in self._scores]
        if todo:
            s = self._reranker.score(query, [documents[i] for i in todo])
            for i, v in zip(todo, np.asarray(s, dtype=np.float64).reshape(-1)):
                self._scores[keys[i]] = float(v)
            self.scored += len(todo)
        return np.array([self._scores[k] for k in keys], dtype=np.float64)

    def save(self) -> None:
        if not self.cache_file or not self._scores:
            return

        buf = io.BytesIO()
        np.savez(buf, keys=np.array(list(self._scores)), values=np.array(list(self._scores.values())))
        atomic_write_bytes(self.cache_file, buf.getvalue())
