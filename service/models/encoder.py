"""The bi-encoder used for search, index building and evaluation."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from indexes.index import ModelInfo

from .engine import EngineOptions, InferenceEngine
from .folder import is_model_folder, load_model, model_fingerprint

# model_fingerprint belongs to the folder module; it is re-exported for callers that import it with the Encoder
__all__ = ["Encoder", "cache_dir", "load_sentence_transformer", "model_fingerprint"]


def cache_dir(home: Path | None) -> Path:
    """``$SAMELANG_HOME/cache``: exported ONNX graphs, embedding and score caches."""
    if home is None:
        from ..config import Settings

        home = Settings().home
    return Path(home) / "cache"


def load_sentence_transformer(path: Path, device: str = "cpu", home: Path | None = None):
    """A SentenceTransformer from a full checkpoint or a LoRA adapter folder (merged onto the converted
    base model). The BERT pooler is never read here (mean pooling over token states), so the converted
    base's lack of one is expected, not a sign of an untrained model."""
    from sentence_transformers import SentenceTransformer

    return load_model(
        path,
        lambda folder: SentenceTransformer(str(folder), device=device),
        home,
        unused={"pooler": "mean pooling reads the token states"},
    )


class Encoder:
    """A sentence-transformers bi-encoder with e5's ``query: `` / ``passage: `` prompts, run by the
    :class:`~service.models.engine.InferenceEngine` (length-sorted token batches, precision modes).

    ``options`` defaults to fp32: training and evaluation get the fp32 reference unless they ask;
    the service passes its ``--precision`` (``auto``: the model card's choice)."""

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        home: Path | None = None,
        options: EngineOptions | None = None,
    ):
        self.path = Path(path)
        if not is_model_folder(self.path):
            raise FileNotFoundError(
                f"no bi-encoder checkpoint at {self.path}: run `samelang models prepare` (base model) "
                "or `samelang train biencoder` (aligned model)"
            )
        self.model = load_sentence_transformer(self.path, device=device, home=home)
        self.name = self.path.name
        self.dim = int(self.model.get_embedding_dimension())
        self.fingerprint = model_fingerprint(self.path)
        prompts = getattr(self.model, "prompts", {}) or {}
        self._query_prompt = prompts.get("query", "")
        self._passage_prompt = prompts.get("passage", "")
        pooling = getattr(self.model[1], "pooling_mode", "mean") if len(self.model) > 1 else "mean"
        if pooling != "mean":
            raise ValueError(f"{self.path}: the inference engine implements mean pooling, the model uses {pooling}")
        self.engine = InferenceEngine(
            self.model[0].auto_model,
            self.model.tokenizer,
            "embed",
            self.fingerprint,
            cache_dir(home),
            options or EngineOptions(precision="fp32"),
            device=device,
            max_length=int(self.model.max_seq_length or 512),
            model_dir=self.path,
        )

    @property
    def precision(self) -> str:
        """``fp32`` or e.g. ``int8``: what embedding caches must key on besides the fingerprint."""
        return self.engine.precision

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(self.name, self.fingerprint, self.dim)

    def _encode(self, texts: list[str], prompt: str, progress: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.engine.run([prompt + t for t in texts], progress=progress)

    def encode_queries(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Queries as the model was trained to see them (its query prompt). The service gathers
        concurrent calls into one pass with its own micro-batcher (:mod:`service.batching`)."""
        return self._encode(texts, self._query_prompt, progress)

    def encode_passages(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._encode(texts, self._passage_prompt, progress)

    @functools.cached_property
    def analyzer(self) -> tuple[str, object]:
        """(name, function) of the lexical analyzer: this model's subword tokenizer, lower-cased, word
        markers dropped (see :mod:`indexes.lexical` for why subwords). The name is a checksum of the
        vocabulary (nothing that a library upgrade renames), so an index's BM25 half is only ever
        queried with the terms it was built on."""
        from tokenizers import Tokenizer

        # a copy: the engine's calls set truncation and padding on the shared one
        backend = Tokenizer.from_str(self.model.tokenizer.backend_tokenizer.to_str())
        backend.no_truncation()
        backend.no_padding()
        vocab = sorted(backend.get_vocab().items(), key=lambda kv: kv[1])
        digest = hashlib.sha256("\n".join(k for k, _ in vocab).encode()).hexdigest()[:12]

        def analyze(text: str) -> list[str]:
            tokens = backend.encode(text, add_special_tokens=False).tokens
            return [w for w in (t.lstrip("\u2581").lower() for t in tokens) if w]

        return f"subword-lower:{digest}", analyze
