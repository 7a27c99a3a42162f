"""A language-aware fused retriever (``models/<name>/fused.json``): the base model with BM25 ranks the reader's own
language best, the aligned model (seed 000) finds answers in any language, so each document is scored by the model
that is good at *its* relation to the query (why, and how it is tuned: ``docs/design.md``):

* ``same(q, d) = z_same(cos_same(q, d) + w * bm25(q, d) / max_d' bm25(q, d')) + beta * z_cross(cos_cross(q, d))``
  when ``d`` is in the query's language (``beta``, 0 unless tuned, adds the cross model's view as an ensemble);
* ``cross(q, d) = z_cross(cos_cross(q, d)) + c`` otherwise; ``z(s) = (s - mean_q) / std_q``, from the query's
  cosines with fixed reference passages (``calibration.npz``), puts both models on one scale at any collection size.

A labelled group is ranked by its reader's-language version; an unlabelled hit whose aligned cosine with a higher
hit reaches ``tau`` is taken as its translation. The index stores ``[v_same; v_cross] / sqrt(2)`` (a unit vector: any
store works), is searched with ``[q_same * a; q_cross * b]`` and rescores the candidates from their stored halves.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from samelang.core.models.contracts import Capabilities
from samelang.corpora import XQUAD_LANGS, load_xquad
from samelang.primitives.atomic import atomic_write_bytes, atomic_write_text
from samelang.primitives.identity import ModelInfo

FUSED_CONFIG = "fused.json"
CALIBRATION = "calibration.npz"  # both models' vectors of the reference passages (float16)
SQRT2 = float(np.sqrt(2.0))


@dataclass(frozen=True)
class FusionConfig:
    """What ``fused.json`` holds. ``same`` / ``cross``: model folders (``base`` or a folder name
    under ``models/``, or a path)."""

    same: str = "base"
    cross: str = "e5-small-aligned"
    cross_offset: float = 2.0  # c: z-units another language's document gets over the reader's own
    translation_threshold: float = 0.8  # tau: aligned cosine at which two documents are translations
    candidate_depth: int = 100  # documents the store returns per search before the fused scoring
    calibration_rows: int = 2048  # without calibration.npz: the index documents (evenly spaced) that calibrate z
    query_weights: tuple[float, float] = (1.0, 0.25)  # (a, b) of the store's candidate search
    lexical_weight: float = 0.04  # w, tuned with c: the BM25 weight its rows are judged and served with
    same_cross_weight: float = 0.0  # beta: the cross model's z-score's weight for the reader's-language documents

    @classmethod
    def read(cls, folder: Path) -> FusionConfig:
        raw = json.loads((Path(folder) / FUSED_CONFIG).read_text())
        raw = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        if "query_weights" in raw:
            raw["query_weights"] = tuple(raw["query_weights"])
        return cls(**raw)

    def write(self, folder: Path, note: dict | None = None) -> None:
        Path(folder).mkdir(parents=True, exist_ok=True)
        data = {**asdict(self), "query_weights": list(self.query_weights), **(note or {})}
        atomic_write_text(Path(folder) / FUSED_CONFIG, json.dumps(data, indent=2) + "\n")


def query_moments(x: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation (floored: a one-document sample) of a query's cosines with the
    calibration passages: the z-units of both halves' scores."""
    return float(x.mean()), max(float(x.std()), 1e-3)


def is_fused_folder(path: str | Path) -> bool:
    return (Path(path) / FUSED_CONFIG).exists()


def fused_fingerprint(same: str, cross: str) -> str:
    """A fused retriever's identity: its parts' (what its vectors depend on; the scoring knobs in
    ``fused.json`` change no vector, so an index stays valid when they are tuned again)."""
    return hashlib.sha256(f"fused-v1:{same}:{cross}".encode()).hexdigest()


def joined_tag(tags: list[str]) -> str:
    """The parts' precision or cache tags as one (``int8+fp32``; one tag when they agree): what a
    fused retriever's embedding caches and demo index are keyed on."""
    return "+".join(dict.fromkeys(tags))


class FusedEncoder:
    """Two bi-encoders as one: vectors are ``[same; cross] / sqrt(2)`` (each half unit-normalised),
    so an index built with it holds both models' vectors; it scores documents with each half itself
    (:meth:`fused_scores`, see the module docstring), and declares so (``capabilities.fused``)."""

    capabilities = Capabilities(fused=True)

    def __init__(self, path: Path, same, cross, config: FusionConfig):
        self.path, self.same, self.cross, self.fusion = Path(path), same, cross, config
        # one model in both roles (an encoder trained to put relevance before language): each text is
        # encoded once and its vector fills both halves, so an index costs one model's embedding time
        self.one_model = same is cross
        self.name = self.path.name
        self.dim = same.dim + cross.dim
        self.split = same.dim  # where the cross half starts
        self.fingerprint = fused_fingerprint(same.fingerprint, cross.fingerprint)
        self.home = getattr(same, "home", None)
        ref = self.path / CALIBRATION
        self.calibration = None  # (same, cross) unit vectors of the reference passages
        if ref.exists():
            with np.load(ref) as z:
                self.calibration = (z["same"].astype(np.float32), z["cross"].astype(np.float32))

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(self.name, self.fingerprint, self.dim)

    @property
    def precision(self) -> str:
        return joined_tag([self.same.precision, self.cross.precision])

    @property
    def cache_tag(self) -> str:
        return joined_tag([self.same.cache_tag, self.cross.cache_tag])

    @property
    def engine(self):  # the token counter and tokenizer (both parts are e5: the same tokenizer)
        return self.same.engine

    @property
    def analyzer(self):
        return self.same.analyzer

    @property
    def unbatched(self) -> FusedEncoder:
        return self

    def prompt(self, passages: bool = False) -> str:
        return self.same.prompt(passages)

    def encode_text(self, texts: list[str], prompt: str = "", pooled: bool = False) -> np.ndarray:
        """Both halves' vectors of ``prompt + text``, joined. ``pooled`` changes nothing: a fused vector
        is two unit halves joined and has no form before normalisation."""
        return self._both(lambda m: m.encode_text(texts, prompt))

    def count_tokens(self, texts: list[str], passages: bool = False) -> list[int]:
        return self.same.count_tokens(texts, passages)

    @staticmethod
    def join(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        def unit(x):
            x = np.asarray(x, dtype=np.float32)
            return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)

        return np.concatenate([unit(a), unit(b)], axis=1) / SQRT2

    def _both(self, encode) -> np.ndarray:
        a = encode(self.same)
        return self.join(a, a if self.one_model else encode(self.cross))

    def encode_queries(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._both(lambda m: m.encode_queries(texts, progress))

    def encode_passages(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._both(lambda m: m.encode_passages(texts, progress))

    def halves(self, vecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(same, cross) unit vectors of stored or query vectors."""
        v = np.asarray(vecs, dtype=np.float32) * SQRT2
        return v[..., : self.split], v[..., self.split :]

    def fused_scores(self, qvec: np.ndarray, doc_vecs: np.ndarray, in_reader: np.ndarray, calibration,
                     lexical: Callable[[np.ndarray], np.ndarray] | None = None,
                     config: FusionConfig | None = None) -> np.ndarray:  # fmt: skip
        """The fused score of documents (the module docstring): for those ``in_reader`` (the query's language)
        the same-language model's cosine (through ``lexical``: the hybrid with BM25) in z-units plus
        ``same_cross_weight`` times the cross-language model's z-score, for the others that z-score plus
        ``cross_offset``; z over the query's cosines with ``calibration`` ((same, cross) reference vectors).
        ``config``: other knobs than the folder's (a grid, a test)."""
        d_same, d_cross = self.halves(doc_vecs)
        q_same, q_cross = (h.reshape(-1) for h in self.halves(qvec[:1]))
        cal_same, cal_cross = calibration
        mu_s, sd_s = query_moments(cal_same @ q_same)
        mu_c, sd_c = query_moments(cal_cross @ q_cross)
        same = (d_same @ q_same).astype(np.float64)
        if lexical is not None:
            same = lexical(same)
        cross = (d_cross @ q_cross - mu_c) / sd_c
        f = config or self.fusion
        return np.where(in_reader, (same - mu_s) / sd_s + f.same_cross_weight * cross, cross + f.cross_offset)

    def store_query(self, qvec: np.ndarray) -> np.ndarray:
        """The vector the store is searched with: ``[q_same * a; q_cross * b]`` (see the module)."""
        s, c = self.halves(qvec)
        a, b = self.fusion.query_weights
        return np.concatenate([s * a, c * b], axis=-1).astype(np.float32) / SQRT2


def reference_passages() -> list[str]:
    """The calibration's reference passages: every other XQuAD train-article paragraph, 12 languages."""

    return [p.text for x in XQUAD_LANGS for p in load_xquad([x], split="train").paragraphs][::2]


def write_calibration(encoder: FusedEncoder) -> Path:
    """Embed the reference passages with both models into ``calibration.npz`` (float16, atomically)."""

    same, cross = encoder.halves(encoder.encode_passages(reference_passages(), progress=True))
    buf = io.BytesIO()
    np.savez(buf, same=same.astype(np.float16), cross=cross.astype(np.float16))
    atomic_write_bytes(encoder.path / CALIBRATION, buf.getvalue())
    return encoder.path / CALIBRATION
