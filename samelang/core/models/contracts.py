"""The contracts the pipeline, the index builder, the routes and the evaluations rely on, declared once.

Each has several implementations that must stay interchangeable: a bi-encoder is the plain
:class:`~samelang.core.models.encoder.Encoder` (ONNX Runtime or torch underneath), the two-model
:class:`~samelang.core.models.fused.FusedEncoder`, the service's micro-batched wrapper and the
evaluation's memoised one; a reranker is a cross-encoder, the bi-encoder's cosine, the micro-batched
wrapper or the evaluation's score cache; and under each, the engine runs one of two backends
(:class:`~samelang.core.runtime.engine.Backend`).
What a model does beyond its role's contract is declared, not probed: :class:`Capabilities`, a class attribute
of each implementation (wrappers forward it), checked at load by :func:`check_capabilities`.
``tests/core/models/test_contracts.py`` checks each against these declarations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from samelang.primitives.identity import ModelInfo


@dataclass(frozen=True)
class Capabilities:
    """What a model does beyond its role's contract. Code outside the model layer reads these flags
    instead of asking an object whether it has an attribute: a wrapper that forwards attributes would
    answer yes for what it does not do, and a missing method would show only at the call."""

    fused: bool = False  # bi-encoder: two models in one (fusion, calibration, halves, store_query, fused_scores)
    scores_vectors: bool = False  # reranker: scores the served encoder's vectors (encoder, score_vectors)
    scores_pairs: bool = False  # reranker: scores (query, document) pairs in batches (score_pairs)
    generates: bool = True  # generator: writes an answer (False: none is asked for, the answer is None)
    checks_fit: bool = False  # generator: knows its context (fits, n_ctx, count_tokens, truncate)


# what each capability promises the object has (checked at load)
PROMISES = {
    "fused": ("fusion", "calibration", "halves", "store_query", "fused_scores"),
    "scores_vectors": ("encoder", "score_vectors"),
    "scores_pairs": ("score_pairs",),
    "checks_fit": ("fits", "n_ctx", "count_tokens", "truncate"),
}


def check_capabilities(model, role: str) -> None:
    """Raise ``TypeError`` naming ``role`` when ``model`` declares no :class:`Capabilities`, or lacks a member
    that a capability it declares promises (the one place that looks: the loaders call it)."""
    caps = getattr(model, "capabilities", None)
    if not isinstance(caps, Capabilities):
        raise TypeError(f"the {role} {type(model).__name__} declares no capabilities (a Capabilities class attribute)")
    for f in fields(caps):
        missing = [m for m in PROMISES.get(f.name, ()) if getattr(caps, f.name) and not hasattr(model, m)]
        if missing:
            raise TypeError(f"the {role} {type(model).__name__} declares {f.name} but has no {', '.join(missing)}")


@runtime_checkable
class TextEncoder(Protocol):
    """A bi-encoder: unit-length vectors of queries and of passages (e5's two prompts), and the identity
    an index records of the model that built it."""

    name: str
    dim: int
    fingerprint: str
    capabilities: Capabilities

    @property
    def info(self) -> ModelInfo: ...

    @property
    def cache_tag(self) -> str:
        """What caches and indexes key on besides the fingerprint (the precision and its recipe)."""
        ...

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
    fingerprint: str
    path: Path | None  # its model folder (None: the bi-encoder's cosine has none)
    capabilities: Capabilities

    def score(self, query: str, documents: list[str]) -> np.ndarray: ...
