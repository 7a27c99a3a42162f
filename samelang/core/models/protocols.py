"""The contracts the pipeline, the index builder, the routes and the evaluations rely on, declared once.

Each has several implementations that must stay interchangeable: a bi-encoder is the plain
:class:`~samelang.core.models.encoder.Encoder` (ONNX Runtime or torch underneath), the two-model
:class:`~samelang.core.models.fused.FusedEncoder`, the service's micro-batched wrapper and the
evaluation's memoised one; a reranker is a cross-encoder, the bi-encoder's cosine, the micro-batched
wrapper or the evaluation's score cache; and under each, the engine runs one of two backends
(:class:`~samelang.core.runtime.engine.Backend`).
``tests/core/models/test_protocols.py`` checks each against these declarations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from samelang.ground.identity import ModelInfo


@runtime_checkable
class TextEncoder(Protocol):
    """A bi-encoder: unit-length vectors of queries and of passages (e5's two prompts), and the identity
    an index records of the model that built it."""

    name: str
    dim: int
    fingerprint: str

    @property
    def info(self) -> ModelInfo: ...

    @property
    def analyzer(self) -> tuple[str, Callable[[str], list[str]]]:
        """(name, function) of the lexical analyzer an index's BM25 half is built and queried with."""
        ...

    def encode_queries(self, texts: list[str], progress: bool = False) -> np.ndarray: ...

    def encode_passages(self, texts: list[str], progress: bool = False) -> np.ndarray: ...


@runtime_checkable
class Reranker(Protocol):
    """Scores documents for one query, higher first; ``kind`` says what scores (a cross-encoder, or
    the bi-encoder's cosine) and ``name`` which model."""

    name: str
    kind: str

    def score(self, query: str, documents: list[str]) -> np.ndarray: ...
