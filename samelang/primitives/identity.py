"""The identity of an embedding model as an index records it and a server checks it: the model
that encodes queries must be the one that built the vectors."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelInfo:
    """What the index records about the embedding model that built it."""

    name: str
    fingerprint: str
    dim: int
