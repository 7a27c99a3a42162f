"""Re-embedding an index (``samelang adapt``): the live generation's documents under another model, written as
the next generation with the same crash-safety as ``index add`` (:func:`~.writes._commit`), so that a running
server swaps it in and a crash leaves the old generation serving."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from samelang.indexes import vectors as V
from samelang.indexes.docstore import DocStore
from samelang.indexes.generations import current_generation, writer_lock
from samelang.indexes.lexical import Analyzer
from samelang.indexes.writes import _commit, _lexical_record
from samelang.primitives.identity import ModelInfo


class IndexChanged(RuntimeError):
    """The live generation is not the one a caller computed vectors for (a writer came between)."""


def reembed_index(
    path: Path,
    vectors: np.ndarray,
    model: ModelInfo,
    expect: str,
    note: dict,
    analyzer: tuple[str, Analyzer] | None = None,
) -> dict:
    """The live generation's documents (the same rows, texts and labels) under another model: ``vectors``
    (one a row of :meth:`DocStore.rows`, computed by ``model`` from the generation named ``expect``) written
    as the next generation, crash-safe as ``index add`` (a scratch folder, then ``CURRENT`` switched); a
    server polling the index swaps it in. ``note`` is kept in the manifest (``reembedded``). A FAISS store
    only: a Milvus collection has its dimension fixed (rebuild with ``samelang index build --store milvus``)."""
    path = Path(path)
    with writer_lock(path):
        gen = current_generation(path)
        if gen.name != expect:
            raise IndexChanged(f"{path} moved from {expect} to {gen.name} while its vectors were computed")
        manifest = json.loads((gen / "manifest.json").read_text())
        if (manifest.get("store") or {}).get("kind") == "milvus":
            raise ValueError(f"{path} keeps its vectors in Milvus, whose collection has a fixed dimension: build the "
                             "index again with `samelang index build --store milvus --model MODEL`")  # fmt: skip
        store = DocStore(gen / "docs.sqlite", readonly=True)
        try:
            rows = store.rows()
        finally:
            store.close()
        if len(rows) != len(vectors):
            raise ValueError(f"{len(vectors)} vectors for the {len(rows)} documents of {path}")
        spec = V.IndexSpec(**manifest["index"])
        index = V.new_index(spec, model.dim, train_vectors=vectors)
        V.add_vectors(index, vectors, np.asarray(rows, dtype=np.int64))
        manifest = dict(manifest, embedding_model={"name": model.name, "fingerprint": model.fingerprint},
                        dim=model.dim, reembedded=note)  # fmt: skip
        if analyzer is not None:
            manifest["lexical"] = _lexical_record(analyzer[0])
        else:
            manifest.pop("lexical", None)
        return _commit(path, gen, manifest, index, [], analyzer[1] if analyzer else None, (), None)
