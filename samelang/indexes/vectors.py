"""FAISS vector store of L2-normalised vectors (inner product = cosine).

Index kinds: ``flat`` (exact, default), ``hnsw`` (graph; ``M`` and
``ef_search``) and ``ivf`` (inverted lists; ``nlist`` and ``nprobe``). Every
kind is wrapped in an ``IndexIDMap2`` so FAISS ids are the docstore rows. On a
host with GPUs the index is copied to GPU for search when asked
(``use_gpu``) and ``faiss.get_num_gpus() > 0``; HNSW has no GPU version and
stays on CPU.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import faiss
import numpy as np

KINDS = ("flat", "hnsw", "ivf")


@dataclass(frozen=True)
class IndexSpec:
    kind: str = "flat"
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    ivf_nlist: int = 0  # 0: about 4 * sqrt(n), chosen at build time

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"index kind must be one of {KINDS}, got {self.kind!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def normalise(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def new_index(spec: IndexSpec, dim: int, train_vectors: np.ndarray | None = None) -> faiss.Index:
    if spec.kind == "flat":
        inner = faiss.IndexFlatIP(dim)
    elif spec.kind == "hnsw":
        inner = faiss.IndexHNSWFlat(dim, spec.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        inner.hnsw.efConstruction = spec.hnsw_ef_construction
    else:
        if train_vectors is None or len(train_vectors) == 0:
            raise ValueError("an ivf index needs vectors to train on")
        n = len(train_vectors)
        nlist = spec.ivf_nlist or max(1, min(int(4 * np.sqrt(n)), n // 39 or 1))
        quantizer = faiss.IndexFlatIP(dim)
        inner = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        inner.train(normalise(train_vectors))
    return faiss.IndexIDMap2(inner)


def set_search_params(index: faiss.Index, ef_search: int | None = None, nprobe: int | None = None) -> None:
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
    if ef_search is not None and isinstance(inner, faiss.IndexHNSW):
        inner.hnsw.efSearch = ef_search
    if nprobe is not None and isinstance(inner, faiss.IndexIVF):
        inner.nprobe = nprobe


_search_threads: int | None = None  # set by a server; None: FAISS's default (all cores)


def set_search_threads(n: int | None) -> None:
    """FAISS's OpenMP threads for every search of this process (None: FAISS's default). A server asks one
    query per search call, which gains nothing from more threads, and OpenMP workers busy-wait after each
    parallel section: on 2 cores that doubled the CPU time of a /search's non-encoder work (2.2 -> 4.4 ms
    per request), time the encoder and the HTTP layer lose. OpenMP keeps this setting per thread (a new
    thread starts from the default), so :func:`apply_search_threads` sets it again in the thread that
    searches, before each search."""
    global _search_threads
    _search_threads = None if n is None else max(1, int(n))
    apply_search_threads()


def apply_search_threads() -> None:
    """Give the calling thread the process's search thread count (a no-op when none was set)."""
    if _search_threads is not None:
        faiss.omp_set_num_threads(_search_threads)


def add_vectors(index: faiss.Index, vectors: np.ndarray, rows: np.ndarray) -> None:
    index.add_with_ids(normalise(vectors), np.asarray(rows, dtype=np.int64))


def remove_rows(index: faiss.Index, rows) -> faiss.Index:
    """``index`` without the vectors of ``rows`` (deleted documents). A flat index removes them in place.
    IVF and HNSW cannot under an ``IndexIDMap2`` (IVF's removal leaves its internal ids with holes that the
    id map does not follow; HNSW's graph has no removal), so the same trained structure is refilled with
    the stored vectors that stay, under the same ids: nothing is embedded again."""
    drop = np.asarray(sorted(set(int(r) for r in rows)), dtype=np.int64)
    inner = faiss.downcast_index(index.index)
    if isinstance(inner, faiss.IndexFlat):
        index.remove_ids(faiss.IDSelectorBatch(drop))
        return index
    if isinstance(inner, faiss.IndexIVF):
        inner.make_direct_map()  # IVF gives vectors back only with it
    ids = faiss.vector_to_array(index.id_map).astype(np.int64)
    keep = ids[~np.isin(ids, drop)]
    vecs = index.reconstruct_batch(keep) if len(keep) else None
    empty = faiss.clone_index(inner)  # keeps the IVF's trained centroids, the HNSW's parameters
    empty.reset()
    fresh = faiss.IndexIDMap2(empty)
    if vecs is not None:
        fresh.add_with_ids(np.ascontiguousarray(vecs, dtype=np.float32), keep)
    return fresh


def to_gpu_if_available(index: faiss.Index, use_gpu: bool) -> tuple[faiss.Index, bool]:
    """Copy to all GPUs when asked and present; returns (index, on_gpu)."""
    if not use_gpu or not hasattr(faiss, "get_num_gpus") or faiss.get_num_gpus() == 0:
        return index, False
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
    if isinstance(inner, faiss.IndexHNSW):
        return index, False
    return faiss.index_cpu_to_all_gpus(index), True


def write(index: faiss.Index, path: Path) -> None:
    faiss.write_index(index, str(path))


def read(path: Path) -> faiss.Index:
    return faiss.read_index(str(path))
