"""The bi-encoder used for search, index building and evaluation."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np

from samelang.core.model_folder import model_fingerprint
from samelang.core.models.contracts import Capabilities
from samelang.core.models.hub import locate
from samelang.core.models.loading import load_model
from samelang.core.models.served import EngineModel
from samelang.core.runtime.engine import engine_for
from samelang.core.runtime.heads import embed_meta
from samelang.core.runtime.precision import EngineOptions
from samelang.primitives.identity import ModelInfo

# model_fingerprint belongs to the folder module; it is re-exported for callers that import it with the Encoder
__all__ = ["Encoder", "load_sentence_transformer", "model_fingerprint"]


def load_sentence_transformer(path: Path, device: str = "cpu", *, home: Path, trust_remote_code: bool = False):
    """A SentenceTransformer from a full checkpoint or a LoRA adapter folder (merged onto the converted
    base model). The BERT pooler is never read here (mean pooling over token states), so the converted
    base's lack of one is expected, not a sign of an untrained model."""
    from sentence_transformers import SentenceTransformer  # deferred: keeps sentence_transformers out of start-up

    return load_model(
        path,
        lambda folder: SentenceTransformer(str(folder), device=device, trust_remote_code=trust_remote_code),
        home,
        unused={"pooler": "mean pooling reads the token states"},
        trust_remote_code=trust_remote_code,
    )


class Encoder(EngineModel):
    """A sentence-transformers bi-encoder with e5's ``query: `` / ``passage: `` prompts, run by the
    :class:`~samelang.core.runtime.engine.InferenceEngine` (length-sorted token batches, precision modes).

    ``options`` defaults to fp32: training and evaluation get the fp32 reference unless they ask;
    the service passes its ``--precision`` (``auto``: the model card's choice). Served from ONNX, the
    torch weights are read only to export the graph (once per model and precision); ``model`` loads
    the sentence-transformers model on first use, for callers that want it (a benchmark's reference)."""

    capabilities = Capabilities()

    def __init__(self, path: str | Path, device: str = "cpu", *, home: Path, options: EngineOptions | None = None):
        fix = "run `samelang models prepare` (base model) or `samelang train biencoder` (aligned model)"
        self.path = locate(path, "bi-encoder", fix)
        self.device, self.home = device, home
        self.trust_remote_code = bool(options and options.trust_remote_code)
        self.name = self.path.name
        self.fingerprint = model_fingerprint(self.path)
        self.engine = engine_for(self._load, "embed", self.path, home, options, device, fingerprint=self.fingerprint)
        meta = self.engine.meta
        self.dim = int(meta["dim"])
        self._query_prompt, self._passage_prompt = meta["query_prompt"], meta["passage_prompt"]

    def _load(self):
        """(transformer, tokenizer, meta) for the engine; a fresh model that the engine may drop."""
        model = self.model_fresh()
        return model[0].auto_model, model.tokenizer, embed_meta(model, self.name)

    def model_fresh(self):
        """A newly loaded sentence-transformers model (the engine may drop it after export)."""
        trust = self.trust_remote_code
        return load_sentence_transformer(self.path, self.device, home=self.home, trust_remote_code=trust)

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(self.name, self.fingerprint, self.dim)

    def _encode(self, texts: list[str], prompt: str, progress: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.engine.run([prompt + t for t in texts], progress=progress)

    def encode_queries(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Queries as the model was trained to see them (its query prompt). The service gathers
        concurrent calls into one pass with its own micro-batcher (:mod:`samelang.service.batching`)."""
        return self._encode(texts, self._query_prompt, progress)

    def encode_passages(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._encode(texts, self._passage_prompt, progress)

    @property
    def unbatched(self) -> Encoder:
        """This encoder past any micro-batcher wrapped around it (:mod:`samelang.service.batching`): for callers
        with many or long texts, which gain nothing from waiting and would hold up the short queries
        queued behind them."""
        return self

    def encode_text(self, texts: list[str], prompt: str = "", pooled: bool = False) -> np.ndarray:
        """Vectors of ``prompt + text`` for any prompt (text-embeddings-inference's routes: a client
        that names no prompt gets none, as from TEI); ``pooled``: the mean-pooled vectors before L2
        normalisation (TEI's ``normalize: false``; nothing here searches with them)."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.engine.run([prompt + t for t in texts], raw=pooled)

    def prompt(self, passages: bool = False) -> str:
        """The text put before a query (or a passage) when it is encoded: e5's ``query: `` / ``passage: ``."""
        return self._passage_prompt if passages else self._query_prompt

    def count_tokens(self, texts: list[str], passages: bool = False) -> list[int]:
        """Tokens each text is encoded as, prompt and special tokens included (after truncation)."""
        return self.engine.token_counts([self.prompt(passages) + t for t in texts])

    @functools.cached_property
    def analyzer(self) -> tuple[str, object]:
        """(name, function) of the lexical analyzer: this model's subword tokenizer, lower-cased, word
        markers dropped (see :mod:`samelang.indexes.lexical` for why subwords). The name is a checksum of the
        vocabulary (nothing that a library upgrade renames), so an index's BM25 half is only ever
        queried with the terms it was built on."""
        # The engine's own tokenizer, run stage by stage (normaliser, pre-tokeniser, model): what
        # ``encode(text, add_special_tokens=False).tokens`` gives, without the engine's truncation,
        # and without a second copy of a tokenizer that holds ~0.3 GB for e5's 250k-piece vocabulary.
        tok = self.engine.tokenizer
        normalizer, pre_tokenizer, model = tok.normalizer, tok.pre_tokenizer, tok.model
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        digest = hashlib.sha256("\n".join(k for k, _ in vocab).encode()).hexdigest()[:12]

        def analyze(text: str) -> list[str]:
            text = normalizer.normalize_str(text) if normalizer is not None else text
            pieces = pre_tokenizer.pre_tokenize_str(text) if pre_tokenizer is not None else [(text, None)]
            tokens = (t.value for piece, _ in pieces for t in model.tokenize(piece))
            return [w for w in (t.lstrip("\u2581").lower() for t in tokens) if w]

        return f"subword-lower:{digest}", analyze
