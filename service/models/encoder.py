"""The bi-encoder used for search, index building and evaluation."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from indexes.index import ModelInfo


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
    """A sentence-transformers bi-encoder with e5's ``query: `` / ``passage: `` prompts."""

    def __init__(self, path: str | Path, device: str = "cpu", batch_size: int = 32, home: Path | None = None):
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
        self._query_prompt = "query" if "query" in prompts else None
        self._passage_prompt = "passage" if "passage" in prompts else None

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(self.name, self.fingerprint, self.dim)

    def _encode(self, texts: list[str], prompt_name: str | None) -> np.ndarray:
        return self.model.encode(
            list(texts),
            prompt_name=prompt_name,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        ).astype(np.float32)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, self._query_prompt)

    def encode_passages(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, self._passage_prompt)
