"""Opening an index and checking it against the model and analyzer that will query it: the reader's
side (:class:`OpenIndex` holds a shared lock on its generation while open, see :mod:`.generations`).
Writing is :mod:`.writes`; this package knows no model: the caller gives the model's identity."""

from __future__ import annotations

import json
import os
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from samelang.indexes import vectors as V
from samelang.indexes.docstore import DocStore
from samelang.indexes.generations import (
    CURRENT,
    FORMAT_VERSION,
    AnalyzerMismatch,
    IndexModelMismatch,
    IndexNotFound,
    current_generation,
    n_rows,
    reader_lock,
)
from samelang.indexes.lexical import FOLDER as LEXICAL
from samelang.indexes.lexical import Analyzer, LexicalIndex
from samelang.indexes.stores import FaissStore, MilvusStore, VectorStore
from samelang.primitives.identity import ModelInfo


@dataclass
class OpenIndex:
    path: Path
    generation: str
    manifest: dict
    store: VectorStore  # the vectors: FAISS in the folder, or a Milvus collection (samelang.indexes.stores)
    docs: DocStore
    _reader_fd: int | None = field(default=None, repr=False)
    lexical: LexicalIndex | None = None  # BM25 over the texts, when the index was built with an analyzer

    def __post_init__(self):
        # closed when closed explicitly, or when the last user (an in-flight request) lets go
        self._finalizer = weakref.finalize(self, _close_index, self.docs, self._reader_fd, self.store)

    @property
    def size(self) -> int:
        """The row space: one past the highest row ever given, deleted rows included (the length of
        per-row arrays). Equal to :attr:`documents` until a delete."""
        return n_rows(self.manifest)

    @property
    def documents(self) -> int:
        """How many documents the index holds."""
        return int(self.manifest["n_docs"])

    @property
    def on_gpu(self) -> bool:
        return self.store.on_gpu

    @property
    def faiss_index(self):
        """The FAISS index of a FAISS-stored index (``None`` for another store)."""
        return getattr(self.store, "index", None)

    @property
    def filters_langs(self) -> bool:
        """Whether :meth:`search` applies a language filter in the store (Milvus) rather than leaving it
        to the caller's over-fetching (FAISS)."""
        return self.store.filters_langs

    @property
    def identity(self) -> tuple[str, str]:
        """(build, generation): changes with every ``index add`` and with a rebuild of the folder."""
        return (str(self.manifest.get("build_id") or self.manifest.get("built_at")), self.generation)

    def search(self, query_vectors: np.ndarray, k: int, ef_search: int | None = None, nprobe: int | None = None,
               langs: Sequence[str] | None = None):  # fmt: skip
        """(scores, rows) of the k nearest documents per query; rows = -1 past the end. ``langs``: only
        documents in those languages, where the store filters (:attr:`filters_langs`)."""
        return self.store.search(query_vectors, k, ef_search=ef_search, nprobe=nprobe, langs=langs)

    def vectors(self, rows: list[int]) -> np.ndarray | None:
        """The stored (normalised) vectors of ``rows``, or ``None`` where the store cannot give them back
        (a GPU copy, an IVF index without a direct map): callers then embed the texts again."""
        if not rows:
            return np.zeros((0, int(self.manifest["dim"])), np.float32)
        return self.store.vectors(rows)

    def close(self) -> None:
        self._finalizer()


def _close_index(docs: DocStore, reader_fd: int | None, store: VectorStore) -> None:
    docs.close()
    store.close()
    if reader_fd is not None:
        os.close(reader_fd)


def check_analyzer(manifest: dict, analyzer: tuple[str, Analyzer] | None, path: Path) -> Analyzer | None:
    """The analyzer to update the lexical half with: ``None`` when the index has none; an error when
    the index has one and the caller's is missing or another."""
    built = (manifest.get("lexical") or {}).get("analyzer")
    if built is None:
        return None
    if analyzer is None or analyzer[0] != built:
        raise AnalyzerMismatch(
            f"the index at {path} has a lexical half analysed by {built!r}, but "
            f"{'no analyzer' if analyzer is None else repr(analyzer[0])} was given: add documents with the model "
            f"that built it, or rebuild with `samelang index build --out {path} ...`"
        )
    return analyzer[1]


def check_model(manifest: dict, model: ModelInfo, path: Path) -> None:
    built = manifest["embedding_model"]
    if built["fingerprint"] != model.fingerprint or manifest["dim"] != model.dim:
        raise IndexModelMismatch(
            f"the index at {path} was built with embedding model {built['name']!r} "
            f"(fingerprint {built['fingerprint'][:12]}), but the model being used is {model.name!r} "
            f"(fingerprint {model.fingerprint[:12]}): rebuild it with "
            f"`samelang index build --model <the served model> --out {path} ...`, or serve the model that built it"
        )


def open_index(path: Path, model: ModelInfo | None = None, use_gpu: bool = False, uri: str | None = None) -> OpenIndex:
    """Load the live generation; refuse it if it was built by another model than ``model``. ``uri``:
    where a Milvus-stored index's Milvus is reached from here (default: the URI it was built with)."""
    path = Path(path)
    for attempt in range(5):  # a writer may switch CURRENT and delete the generation just read: read again
        try:
            gen = current_generation(path)
        except IndexNotFound:
            if attempt == 4 or not (path / CURRENT).exists():
                raise
            time.sleep(0.05)
            continue
        fd = reader_lock(gen)
        if (gen / "manifest.json").exists():
            break
        if fd is not None:
            os.close(fd)
    else:
        raise IndexNotFound(f"index at {path} keeps changing under the reader; try again")
    try:
        manifest = json.loads((gen / "manifest.json").read_text())
        if manifest.get("format_version") != FORMAT_VERSION:
            raise IndexNotFound(
                f"index at {path} has format {manifest.get('format_version')}, expected {FORMAT_VERSION}"
            )
        if model is not None:
            check_model(manifest, model, path)
        store = _open_store(manifest, gen, use_gpu, uri)
        docs = DocStore(gen / "docs.sqlite", readonly=True)
        lex = manifest.get("lexical")
        lexical = LexicalIndex.load(gen / LEXICAL, lex["analyzer"], n_rows(manifest)) if lex else None
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return OpenIndex(path, gen.name, manifest, store, docs, fd, lexical)


def _open_store(manifest: dict, gen: Path, use_gpu: bool, uri: str | None) -> VectorStore:
    """The generation's vectors: its FAISS file, or the Milvus collection its manifest names (at
    ``uri`` when given: the same Milvus seen from another host)."""
    rec = manifest.get("store") or {"kind": "faiss"}
    if rec["kind"] == "milvus":
        return MilvusStore(uri or rec["uri"], rec["collection"], n_rows(manifest), int(manifest["dim"]),
                           generation=int(manifest["generation"]), size=int(manifest["n_docs"]))  # fmt: skip
    return FaissStore(*V.to_gpu_if_available(V.read(gen / "vectors.faiss"), use_gpu))


def index_info(path: Path) -> dict:
    gen = current_generation(Path(path))
    info = json.loads((gen / "manifest.json").read_text())
    info["path"] = str(Path(path).resolve())
    info["live_generation"] = gen.name
    info["size_bytes"] = sum(f.stat().st_size for f in gen.rglob("*") if f.is_file())  # Milvus's own: not here
    return info
