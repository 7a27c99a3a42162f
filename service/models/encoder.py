"""The bi-encoder used for search, index building and evaluation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from indexes.index import ModelInfo

from ..batching import MicroBatcher
from .engine import EngineOptions, InferenceEngine


def model_fingerprint(path: Path) -> str:
    """Identity of a checkpoint: the conversion manifest's source hash when there
    is one (cheap), else a sha256 over the config and weight files."""
    path = Path(path)
    manifest = path / "samelang_manifest.json"
    h = hashlib.sha256()
    if manifest.exists():
        m = json.loads(manifest.read_text())
        for key in ("source_sha256", "adapter_sha256", "weights_sha256", "converter_version"):
            if key in m:
                h.update(f"{key}={m[key]};".encode())
        return h.hexdigest()
    files = sorted(p for p in path.rglob("*") if p.suffix in {".json", ".safetensors", ".bin"} and p.is_file())
    if not files:
        raise FileNotFoundError(f"{path} holds no model files")
    for f in files:
        h.update(str(f.relative_to(path)).encode())
        with open(f, "rb") as fh:
            while block := fh.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def cache_dir(home: Path | None) -> Path:
    """``$SAMELANG_HOME/cache``: exported ONNX graphs, embedding and score caches."""
    if home is None:
        from ..config import Settings

        home = Settings().home
    return Path(home) / "cache"


def load_sentence_transformer(path: Path, device: str = "cpu", home: Path | None = None):
    """A SentenceTransformer from a full checkpoint, or from a LoRA adapter folder
    (``adapter_config.json``) applied to the converted base model and merged."""
    from sentence_transformers import SentenceTransformer

    path = Path(path)
    if not (path / "adapter_config.json").exists():
        return SentenceTransformer(str(path), device=device)
    from peft import PeftModel

    from .base_model import ensure_base_model

    model = SentenceTransformer(str(ensure_base_model(home)), device=device)
    transformer = model[0]
    transformer.model = PeftModel.from_pretrained(transformer.model, str(path)).merge_and_unload()
    return model


class Encoder:
    """A sentence-transformers bi-encoder with e5's ``query: `` / ``passage: `` prompts, run by the
    :class:`~service.models.engine.InferenceEngine` (length-sorted token batches, precision modes).

    ``options`` defaults to fp32: training and evaluation get the reference numerics unless they ask;
    the service passes its ``--precision`` (``auto``: the model card's choice)."""

    def __init__(
        self,
        path: str | Path,
        device: str = "cpu",
        batch_size: int = 32,
        home: Path | None = None,
        options: EngineOptions | None = None,
    ):
        self.path = Path(path)
        if not any((self.path / f).exists() for f in ("modules.json", "config.json", "adapter_config.json")):
            raise FileNotFoundError(
                f"no bi-encoder checkpoint at {self.path}: run `samelang models prepare` (base model) "
                "or `samelang train biencoder` (aligned model)"
            )
        self.model = load_sentence_transformer(self.path, device=device, home=home)
        self.batch_size = batch_size
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

        self._query_batcher: MicroBatcher | None = None

    def enable_micro_batching(self, max_wait_ms: float, max_items: int, on_batch=None) -> None:
        """Gather concurrent ``encode_queries`` calls (the service's /search traffic) into one pass."""
        if self._query_batcher is None:
            encode = lambda texts: self._encode(texts, self._query_prompt)  # noqa: E731
            self._query_batcher = MicroBatcher(encode, max_wait_ms, max_items, "queries", on_batch)
        self._query_batcher.on_batch = on_batch

    @property
    def numerics(self) -> str:
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
        b = self._query_batcher
        if b is not None and 0 < len(texts) <= b.max_items:
            return b.submit(texts)
        return self._encode(texts, self._query_prompt, progress)

    def encode_passages(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._encode(texts, self._passage_prompt, progress)
