"""Rerankers: a cross-encoder checkpoint, or bi-encoder cosine when none is configured."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .encoder import Encoder

BI_ENCODER_COSINE = "bi-encoder-cosine"


class CrossEncoderReranker:
    """Any sentence-transformers ``CrossEncoder`` checkpoint (one output score)."""

    kind = "cross-encoder"

    def __init__(self, path: str | Path, device: str = "cpu", max_length: int = 256, batch_size: int = 32):
        from sentence_transformers import CrossEncoder

        self.path = Path(path)
        if not (self.path / "config.json").exists():
            raise FileNotFoundError(
                f"no cross-encoder checkpoint at {self.path}: train one with `samelang train reranker`, "
                "or leave the reranker unset to rerank by bi-encoder cosine"
            )
        self.model = CrossEncoder(str(self.path), device=device, max_length=max_length, num_labels=1)
        self.name = self.path.name
        self.batch_size = batch_size

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0, dtype=np.float32)
        pairs = [(query, d) for d in documents]
        out = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(out, dtype=np.float32).reshape(-1)


class CosineReranker:
    """Fallback: cosine between the query and document embeddings of the served bi-encoder."""

    kind = BI_ENCODER_COSINE

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.name = BI_ENCODER_COSINE

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0, dtype=np.float32)
        q = self.encoder.encode_queries([query])[0]
        return self.encoder.encode_passages(documents) @ q
