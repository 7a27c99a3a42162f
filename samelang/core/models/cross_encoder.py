"""Rerankers: a cross-encoder checkpoint, or bi-encoder cosine when none is configured."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from samelang.core.model_folder import model_fingerprint
from samelang.core.models.contracts import Capabilities
from samelang.core.models.encoder import Encoder
from samelang.core.models.hub import locate
from samelang.core.models.loading import load_model
from samelang.core.models.served import EngineModel
from samelang.core.runtime.engine import engine_for, sigmoid
from samelang.core.runtime.heads import score_meta
from samelang.core.runtime.precision import EngineOptions

BI_ENCODER_COSINE = "bi-encoder-cosine"


def load_cross_encoder(
    path: Path, device: str = "cpu", max_length: int = 256, *, home: Path, trust_remote_code: bool = False
):
    """A sentence-transformers ``CrossEncoder`` from a full checkpoint, or from a LoRA adapter folder
    merged onto the converted base model, with the adapter's trained pooler and classifier head in
    place of the ones the base model lacks (transformers initialises those at load, and the adapter
    replaces them: a LAMAR folder is a trained reranker, whatever the base load would report)."""
    from sentence_transformers import CrossEncoder  # deferred: keeps sentence_transformers out of start-up

    def build(folder):
        return CrossEncoder(str(folder), device=device, max_length=max_length, num_labels=1,
                            trust_remote_code=trust_remote_code)  # fmt: skip

    return load_model(path, build, home, trust_remote_code=trust_remote_code)


class CrossEncoderReranker(EngineModel):
    """Any sentence-transformers ``CrossEncoder`` checkpoint (one output score), or a LAMAR adapter."""

    capabilities = Capabilities(scores_pairs=True)

    kind = "cross-encoder"

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        max_length: int = 256,
        *,
        home: Path,
        options: EngineOptions | None = None,
    ):
        self.path = locate(
            path, "cross-encoder",
            "train one with `samelang train reranker`, or leave the reranker unset to rerank by bi-encoder cosine",
        )  # fmt: skip
        self.device, self.home, self.max_length = device, home, max_length
        self.trust_remote_code = bool(options and options.trust_remote_code)
        self.name = self.path.name
        self.fingerprint = model_fingerprint(self.path)
        self.engine = engine_for(
            self._load,
            "score",
            self.path,
            home,
            options,
            device,
            max_length=max_length,
            fingerprint=self.fingerprint,
            activation=sigmoid,  # CrossEncoder.predict's default for one label: scores in (0, 1)
        )

    def _load(self):
        """(module, tokenizer, meta) for the engine; a fresh model that the engine may drop."""
        ce = self.model_fresh()
        return ce.model, ce.tokenizer, score_meta(ce, self.name)

    def model_fresh(self):
        """A newly loaded ``CrossEncoder`` (the engine may drop it after export)."""
        return load_cross_encoder(self.path, self.device, self.max_length, home=self.home,
                                  trust_remote_code=self.trust_remote_code)  # fmt: skip

    def score_pairs(self, pairs: list[tuple[str, str]], progress: bool = False) -> np.ndarray:
        """Scores of (query, document) pairs; the service's micro-batcher (:mod:`samelang.service.batching`)
        gathers the pairs of concurrent requests into one call of this."""
        return self.engine.run(list(pairs), progress=progress)

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0, dtype=np.float32)
        return self.score_pairs([(query, d) for d in documents])

    def logits(self, query: str, documents: list[str]) -> np.ndarray:
        """The model's logits under :meth:`score`'s sigmoid (text-embeddings-inference's ``raw_scores``)."""
        return self.engine.run([(query, d) for d in documents], raw=True)

    def count_tokens(self, query: str, documents: list[str]) -> int:
        """Tokens the pairs are scored as (the ``usage`` of the Cohere-shaped route)."""
        return sum(self.engine.token_counts([(query, d) for d in documents]))

    def truncate(self, text: str, n_tokens: int) -> str:
        return self.engine.truncate_text(text, n_tokens)

    def overflowing(self, query: str, documents: list[str]) -> list[bool]:
        """Whether each (query, document) pair is longer than the model's window (and so is cut)."""
        return self.engine.overflowing([(query, d) for d in documents])


class CosineReranker:
    """Fallback: cosine between the query and document embeddings of the served bi-encoder."""

    kind = BI_ENCODER_COSINE
    capabilities = Capabilities(scores_vectors=True)
    path = None  # no folder of its own: the encoder's

    def __init__(self, encoder: Encoder):
        self.encoder = encoder
        self.name = BI_ENCODER_COSINE

    @property
    def fingerprint(self) -> str:
        """The encoder's: the cosine has no weights of its own."""
        return f"{BI_ENCODER_COSINE}:{self.encoder.fingerprint}"

    def score(self, query: str, documents: list[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0, dtype=np.float32)
        q = self.encoder.encode_queries([query])[0]
        return self.score_vectors(q, self.encoder.encode_passages(documents))

    def count_tokens(self, query: str, documents: list[str]) -> int:
        return self.encoder.count_tokens([query])[0] + sum(self.encoder.count_tokens(documents, passages=True))

    def truncate(self, text: str, n_tokens: int) -> str:
        return self.encoder.engine.truncate_text(text, n_tokens)

    @property
    def max_length(self) -> int:
        """The bi-encoder's window, in tokens."""
        return self.encoder.engine.max_length

    def overflowing(self, query: str, documents: list[str]) -> list[bool]:
        """Whether each document (with the query: whether it) is longer than the model's window."""
        engine, prompt = self.encoder.engine, self.encoder.prompt(passages=True)
        long_query = engine.overflowing([self.encoder.prompt() + query])[0]
        return [long_query or x for x in engine.overflowing([prompt + d for d in documents])]

    @staticmethod
    def score_vectors(query_vector: np.ndarray, vectors: np.ndarray) -> np.ndarray:
        """Cosine of one query vector with document vectors (e.g. the index's own, same model)."""
        q = np.asarray(query_vector, dtype=np.float64)
        v = np.asarray(vectors, dtype=np.float64)
        return (v @ q) / np.maximum(np.linalg.norm(v, axis=1) * np.linalg.norm(q), 1e-12)
