"""Rerankers: a cross-encoder checkpoint, or bi-encoder cosine when none is configured."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..batching import MicroBatcher
from .encoder import Encoder, cache_dir, model_fingerprint
from .engine import EngineOptions, InferenceEngine, sigmoid

BI_ENCODER_COSINE = "bi-encoder-cosine"


def load_cross_encoder(path: Path, device: str = "cpu", max_length: int = 256, home: Path | None = None):
    """A sentence-transformers ``CrossEncoder`` from a full checkpoint, or from a LoRA adapter folder
    (``adapter_config.json``, with the trained pooler and head) applied to the converted base model
    and merged, so inference runs a plain model."""
    from sentence_transformers import CrossEncoder

    path = Path(path)
    if not (path / "adapter_config.json").exists():
        return CrossEncoder(str(path), device=device, max_length=max_length, num_labels=1)
    from peft import PeftModel

    from .base_model import ensure_base_model

    model = CrossEncoder(str(ensure_base_model(home)), device=device, max_length=max_length, num_labels=1)
    transformer = model[0]
    transformer.model = PeftModel.from_pretrained(transformer.model, str(path)).merge_and_unload()
    return model.eval()


class CrossEncoderReranker:
    """Any sentence-transformers ``CrossEncoder`` checkpoint (one output score), or a LAMAR adapter."""

    kind = "cross-encoder"

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_length: int = 256,
        batch_size: int = 32,
        home: Path | None = None,
        options: EngineOptions | None = None,
    ):
        self.path = Path(path)
        if not any((self.path / f).exists() for f in ("config.json", "adapter_config.json")):
            raise FileNotFoundError(
                f"no cross-encoder checkpoint at {self.path}: train one with `samelang train reranker`, "
                "or leave the reranker unset to rerank by bi-encoder cosine"
            )
        self.model = load_cross_encoder(self.path, device=device, max_length=max_length, home=home)
        self.name = self.path.name
        self.batch_size = batch_size
        self.fingerprint = model_fingerprint(self.path)
        self.engine = InferenceEngine(
            self.model.model,
            self.model.tokenizer,
            "score",
            self.fingerprint,
            cache_dir(home),
            options or EngineOptions(precision="fp32"),
            device=device,
            max_length=max_length,
            model_dir=self.path,
            activation=sigmoid,  # CrossEncoder.predict's default for one label: scores in (0, 1)
        )

        self._pair_batcher: MicroBatcher | None = None

    def enable_micro_batching(self, max_wait_ms: float, max_items: int, on_batch=None) -> None:
        """Gather the (query, document) pairs of concurrent requests into one pass."""
        if self._pair_batcher is None:
            self._pair_batcher = MicroBatcher(self.engine.run, max_wait_ms, max_items, "pairs", on_batch)
        self._pair_batcher.on_batch = on_batch

    @property
    def numerics(self) -> str:
        return self.engine.precision

    def score_pairs(self, pairs: list[tuple[str, str]], progress: bool = False) -> np.ndarray:
        b = self._pair_batcher
        if b is not None and 0 < len(pairs) <= b.max_items and not progress:
            return b.submit(list(pairs))
        return self.engine.run(list(pairs), progress=progress)

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0, dtype=np.float32)
        return self.score_pairs([(query, d) for d in documents])


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
        return self.score_vectors(q, self.encoder.encode_passages(documents))

    @staticmethod
    def score_vectors(query_vector: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Cosine of one query vector with document vectors (e.g. the index's own, same model)."""
        q = np.asarray(query_vector, dtype=np.float64)
        v = np.asarray(vectors, dtype=np.float64)
        return (v @ q) / np.maximum(np.linalg.norm(v, axis=1) * np.linalg.norm(q), 1e-12)
