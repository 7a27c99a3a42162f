"""Stage-1 teachers of the LAMAR cross-encoder (seed 002, Algorithm 1): ``T(q_en, d_en)``, the
English relevance score the student learns to give every language pair. The paper's teacher is a
strong English reranker; none ships here (no model hub), so besides any CrossEncoder folder the
choices are the base bi-encoder's cosine and the fused hybrid retriever the service serves, a
stronger ranker of English than one cosine. Scores are computed once and cached."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from samelang.core import model_folder
from samelang.core.catalogue import open_encoder, served_fingerprint
from samelang.core.models.base_model import ensure_base_model
from samelang.core.models.cross_encoder import CrossEncoderReranker
from samelang.core.models.encoder import Encoder
from samelang.core.models.fused import is_fused_folder, query_moments
from samelang.core.paths import REPO_MODELS
from samelang.core.runtime.precision import EngineOptions
from samelang.primitives.atomic import cached_array
from samelang.training.lamar_data import DistillInstance


def standardised(s: np.ndarray) -> np.ndarray:
    """Scores over the training pairs as ``(s - mean) / std``: the few-unit scale ADR-MSE's sigmoid
    of score differences works on, whatever the teacher's own scale."""
    return (s - s.mean()) / max(float(s.std()), 1e-6)


class CosineTeacher:
    """The base bi-encoder's English cosine ``cos(q_en, d_en)``, standardised over the
    training pairs: ``T = (cos - mean) / std`` (the student regresses onto a scale of a
    few units, which is what ADR-MSE's sigmoid of score differences works on)."""

    def __init__(self, home: Path, device: str):
        self.encoder = Encoder(ensure_base_model(home), device=device, home=home)

    def raw(self, queries: list[str], docs: list[str]) -> np.ndarray:
        uq, ud = sorted(set(queries)), sorted(set(docs))
        Q = dict(zip(uq, self.encoder.encode_queries(uq), strict=True))
        D = dict(zip(ud, self.encoder.encode_passages(ud), strict=True))
        return np.array([float(Q[q] @ D[d]) for q, d in zip(queries, docs, strict=True)], dtype=np.float32)

    def __call__(self, queries: list[str], docs: list[str]) -> np.ndarray:
        return standardised(self.raw(queries, docs))


class FusedTeacher:
    """A fused retriever's score of the English pair (:mod:`samelang.core.models.fused`, the formula
    for a document in the reader's language): ``z_same(cos_same + w * bm25 / max bm25) + beta *
    z_cross(cos_cross)``, BM25 over the training documents, z-units from the folder's reference
    passages; then standardised over the training pairs as :class:`CosineTeacher`. Why: one cosine
    ranks XQuAD's own language worse than the hybrid of two models and BM25 the service serves
    (Mono-Same nDCG@10 95.9 vs 97.6, docs/evaluation.md), and the student learns no more than its teacher."""

    def __init__(self, path: Path, home: Path):
        self.encoder = open_encoder(path, home=home)
        if not self.encoder.capabilities.fused or self.encoder.calibration is None:
            raise ValueError(f"{path} is no fused retriever with calibration.npz")

    def raw(self, queries: list[str], docs: list[str]) -> np.ndarray:
        from samelang.indexes.lexical import LexicalIndex  # deferred: keeps bm25s out of start-up

        enc, f = self.encoder, self.encoder.fusion
        uq, ud = sorted(set(queries)), sorted(set(docs))
        q_same, q_cross = enc.halves(enc.encode_queries(uq))
        d_same, d_cross = enc.halves(enc.encode_passages(ud))
        name, analyze = enc.analyzer
        lex = LexicalIndex.build(ud, analyze, name)
        cal_same, cal_cross = enc.calibration
        table = {}
        for i, q in enumerate(uq):
            (mu_s, sd_s), (mu_c, sd_c) = query_moments(cal_same @ q_same[i]), query_moments(cal_cross @ q_cross[i])
            bm = lex.scores(analyze(q)).astype(np.float64)
            same = d_same @ q_same[i] + f.lexical_weight * bm / max(bm.max(), 1e-9)
            z = (same - mu_s) / sd_s + f.same_cross_weight * (d_cross @ q_cross[i] - mu_c) / sd_c
            table[q] = dict(zip(ud, z, strict=True))
        return np.array([table[q][d] for q, d in zip(queries, docs, strict=True)], dtype=np.float32)

    def __call__(self, queries: list[str], docs: list[str]) -> np.ndarray:
        return standardised(self.raw(queries, docs))


class CrossEncoderTeacher:
    """Any cross-encoder the service can serve, as it serves it (:class:`CrossEncoderReranker`): a
    sequence classifier (e.g. BAAI/bge-reranker-v2-m3 on a GPU host), a causal-LM reranker scored by
    "yes"/"no" (Qwen3-Reranker), a hub id or a folder, or an adapter trained here (the relevance
    stage's: the best judge of English pairs this repository has): raw logits, at fp32 on a CPU and
    bf16 on a GPU."""

    def __init__(self, path: str, device: str, max_length: int, home: Path):
        precision = "bf16" if device.startswith("cuda") else "fp32"
        self.model = CrossEncoderReranker(path, device=device, max_length=max_length, home=home,
                                          options=EngineOptions(precision=precision, backend="torch"))  # fmt: skip

    def __call__(self, queries: list[str], docs: list[str]) -> np.ndarray:
        pairs = list(zip(queries, docs, strict=True))
        return np.asarray(self.model.engine.run(pairs, progress=True, raw=True), dtype=np.float32).reshape(-1)


def fused_teacher_path(teacher: str) -> Path | None:
    """The fused retriever folder ``teacher`` names (a models/ folder name or a path), if it is one."""
    for path in (REPO_MODELS / teacher, Path(teacher)):
        if teacher != "cosine" and is_fused_folder(path):
            return path
    return None


def teacher_name(teacher: str, home: Path) -> str:
    """The teacher's identity in the score cache: the base model's fingerprint for ``cosine``, a
    fused retriever's fingerprint and knobs."""
    fused = fused_teacher_path(teacher)
    if fused is not None:
        return f"fused:{served_fingerprint(fused, home)[:12]}:{(fused / 'fused.json').read_text()}"
    if teacher != "cosine":  # a folder trained here is named by its weights (a retrained one is another teacher)
        return "cross-encoder:" + (model_folder.model_fingerprint(Path(teacher)) if Path(teacher).is_dir() else teacher)
    return "cosine:" + model_folder.model_fingerprint(ensure_base_model(home))[:12]


def teacher_scores(teacher: str, max_length: int, data: list[DistillInstance], home: Path, device: str) -> np.ndarray:
    """``T(q_en, d_en)`` for every instance, computed once and cached under ``$SAMELANG_HOME/cache``
    (keyed by the teacher's name or fingerprint and the instances; a hit loads no model)."""
    key = hashlib.sha256(teacher_name(teacher, home).encode())
    for x in data:
        key.update(f"{x.qid}|{x.doc_group}\n".encode())
    cache = Path(home) / "cache" / f"teacher-{key.hexdigest()[:20]}.npy"
    fused = fused_teacher_path(teacher)

    def compute() -> np.ndarray:
        if teacher == "cosine":
            model = CosineTeacher(home, device)
        elif fused is not None:
            model = FusedTeacher(fused, home)
        else:
            model = CrossEncoderTeacher(teacher, device, max_length, home)
        return model([x.q_en for x in data], [x.d_en for x in data])

    return cached_array(cache, compute)
