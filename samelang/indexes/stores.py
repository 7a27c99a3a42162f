"""Where an index keeps its vectors: FAISS in the index folder (the default), or a Milvus collection.

Both answer :class:`samelang.indexes.index.OpenIndex`'s calls (nearest rows of query vectors, stored vectors of rows,
the row count); the generations, the SQLite docstore and the lexical half stay in the folder, because a generation is
what readers open and writers replace atomically, and its parts agree by construction (a copy in Milvus would not
survive a crash between two systems). Milvus holds the vector, the row (its key, the docstore's row), ``lang``
(``/search``'s filter) and ``group``. One collection serves every generation: a writer upserts the new rows, then
switches ``CURRENT``; a reader searches ``row < its generation's size``, so rows of a newer generation or of a
crashed write stay unseen, and a retried add overwrites them. A row deleted by generation ``g`` gets ``gone = g``
(live rows: ``gone = LIVE``) and a reader of generation ``h`` searches ``gone > h``; the next writer revives the rows
of a crashed delete (:meth:`MilvusStore.revive`), and a row no generation on disk can see is purged
(:meth:`MilvusStore.purge`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from samelang.indexes import vectors as V

KINDS = ("faiss", "milvus")
MILVUS_INDEX = {"flat": ("FLAT", {}), "hnsw": ("HNSW", {"M": 32, "efConstruction": 200}), "ivf": ("IVF_FLAT", {})}
_UPSERT_ROWS = 1000  # rows per Milvus request (a request is capped at 64 MB)
SCAN_ROWS = 16_384  # a search for every row of an index this small is scanned here (MilvusStore.search)
MILVUS_SCHEMA = 2  # the collection's fields (2: with ``gone``); the manifest's store record names it
LIVE = 2**62  # ``gone`` of a row no generation deleted
_NO_VALUE = ""  # Milvus VARCHAR fields have no null here: an unknown language or no group is ""


class VectorStore(Protocol):
    kind: str
    on_gpu: bool
    filters_langs: bool  # whether search() applies a language filter itself

    @property
    def size(self) -> int: ...

    def search(self, q: np.ndarray, k: int, ef_search=None, nprobe=None, langs=None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows) of the ``k`` nearest rows per query, rows ``-1`` past the end."""

    def vectors(self, rows: list[int]) -> np.ndarray | None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StoreSpec:
    """Which store a build writes to: ``faiss``, or ``milvus`` at ``uri`` (a milvus-lite file path, or
    ``http://host:19530``)."""

    kind: str = "faiss"
    uri: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"store must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "milvus" and not self.uri:
            raise ValueError("--store milvus needs --uri (a milvus-lite file such as ./index.db, or http://host:19530)")

    def resolved_uri(self) -> str | None:
        """A milvus-lite path made absolute: the manifest must name the same file from any directory."""
        if self.uri is None or "://" in self.uri:
            return self.uri
        return str(Path(self.uri).expanduser().resolve())


class FaissStore:
    kind, filters_langs = "faiss", False

    def __init__(self, index, on_gpu: bool = False):
        self.index, self.on_gpu = index, on_gpu

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def search(self, q, k, ef_search=None, nprobe=None, langs=None):
        if not self.on_gpu:
            V.set_search_params(self.index, ef_search=ef_search, nprobe=nprobe)
        V.apply_search_threads()  # OpenMP's thread count is per thread: this request's worker thread
        return self.index.search(V.normalise(q), max(1, min(k, self.size)))

    def vectors(self, rows):
        if self.on_gpu:
            return None
        try:  # one call into FAISS for all rows, not a Python loop (a hybrid /search asks for ~100)
            return np.asarray(self.index.reconstruct_batch(np.asarray(rows, dtype=np.int64)), dtype=np.float32)
        except RuntimeError:  # an IVF index without a direct map
            return None

    def close(self) -> None:
        pass


def _loaded(uri: str, collection: str):
    """A client with ``collection`` loaded: Milvus reads (get, query, a delete by filter) need it, and a
    writer process (``index add``/``delete``) has not loaded it before."""
    client = milvus_client(uri)
    client.load_collection(collection)
    return client


def milvus_client(uri: str):
    try:
        from pymilvus import MilvusClient  # deferred: keeps pymilvus out of start-up
    except ImportError as e:
        raise RuntimeError("the Milvus store needs pymilvus (and milvus-lite for a file URI): "
                           "pip install -e '.[milvus]'") from e  # fmt: skip
    return MilvusClient(uri)


class MilvusStore:
    """One Milvus collection: ``row`` (primary key), ``lang``, ``group``, ``vector`` (inner product on
    normalised vectors: cosine, as FAISS). Searches see rows below ``n_rows`` only (module docstring)."""

    kind, on_gpu, filters_langs = "milvus", False, True

    def __init__(self, uri: str, collection: str, n_rows: int, dim: int, generation: int = 1, size: int | None = None):
        self.uri, self.collection, self.n_rows, self.dim = uri, collection, n_rows, dim
        self.generation, self._size = generation, n_rows if size is None else size
        self._scan: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (rows, langs, vectors)
        self.client = milvus_client(uri)
        if not self.client.has_collection(collection):
            raise FileNotFoundError(f"Milvus at {uri} has no collection {collection!r}: rebuild the index with "
                                    "`samelang index build --store milvus --uri URI ...`")  # fmt: skip
        fields = {f["name"] for f in self.client.describe_collection(collection)["fields"]}
        if "gone" not in fields:  # made before deletion existed
            raise FileNotFoundError(f"Milvus collection {collection!r} at {uri} predates deletion (no 'gone' "
                                    "field): rebuild the index with `samelang index build --store milvus --uri URI "
                                    "...`")  # fmt: skip
        self.client.load_collection(collection)

    @staticmethod
    def create(uri: str, collection: str, dim: int, spec: V.IndexSpec) -> None:
        from pymilvus import DataType, MilvusClient  # deferred: keeps pymilvus out of start-up

        client = milvus_client(uri)
        if client.has_collection(collection):
            client.drop_collection(collection)
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("row", DataType.INT64, is_primary=True)
        schema.add_field("lang", DataType.VARCHAR, max_length=16)
        schema.add_field("group", DataType.VARCHAR, max_length=512)
        schema.add_field("gone", DataType.INT64)  # the generation that deleted the row (LIVE: none)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        index_type, params = MILVUS_INDEX[spec.kind]
        if spec.kind == "hnsw":
            params = {"M": spec.hnsw_m, "efConstruction": spec.hnsw_ef_construction}
        elif spec.kind == "ivf":
            params = {"nlist": spec.ivf_nlist or 128}
        idx = client.prepare_index_params()
        idx.add_index(field_name="vector", index_type=index_type, metric_type="IP", params=params)
        client.create_collection(collection, schema=schema, index_params=idx)

    @staticmethod
    def upsert(uri: str, collection: str, vectors: np.ndarray, rows, langs, groups, gone: int = LIVE) -> None:
        """Write rows (a retried write overwrites the same rows: idempotent)."""
        client = milvus_client(uri)
        vecs = V.normalise(vectors)
        for start in range(0, len(vecs), _UPSERT_ROWS):
            stop = start + _UPSERT_ROWS
            client.upsert(collection, [
                {"row": int(r), "lang": lang or _NO_VALUE, "group": group or _NO_VALUE, "gone": gone,
                 "vector": v.tolist()}
                for r, lang, group, v in zip(rows[start:stop], langs[start:stop], groups[start:stop], vecs[start:stop])
            ])  # fmt: skip
        client.flush(collection)

    @staticmethod
    def _set_gone(client, collection: str, got: list[dict], gone: int) -> None:
        for start in range(0, len(got), _UPSERT_ROWS):
            client.upsert(collection, [dict(g, gone=gone) for g in got[start : start + _UPSERT_ROWS]])
        client.flush(collection)

    @staticmethod
    def delete(uri: str, collection: str, rows: list[int], generation: int) -> None:
        """Mark ``rows`` deleted from ``generation`` on (idempotent; unseen by older generations)."""
        client = _loaded(uri, collection)
        fields = ["row", "lang", "group", "vector"]
        for start in range(0, len(rows), _UPSERT_ROWS):
            got = client.get(collection, ids=[int(r) for r in rows[start : start + _UPSERT_ROWS]], output_fields=fields)
            MilvusStore._set_gone(client, collection, got, generation)

    @staticmethod
    def revive(uri: str, collection: str, live_generation: int) -> int:
        """Undo the marks of deletes that never committed (``gone`` past the live generation); returns
        how many rows were revived."""
        client, total = _loaded(uri, collection), 0
        while True:  # a batch at a time (a query returns at most 16,384 rows); a revived row no longer matches
            got = client.query(collection, filter=f"gone > {live_generation} and gone < {LIVE}",
                               output_fields=["row", "lang", "group", "vector"], limit=_UPSERT_ROWS)  # fmt: skip
            if not got:
                return total
            MilvusStore._set_gone(client, collection, got, LIVE)
            total += len(got)

    @staticmethod
    def purge(uri: str, collection: str, oldest_generation: int) -> None:
        """Remove the rows that no generation from ``oldest_generation`` on can see."""
        client = _loaded(uri, collection)
        client.delete(collection, filter=f"gone <= {oldest_generation}")
        client.flush(collection)

    @property
    def size(self) -> int:
        return self._size

    def _filter(self, langs) -> str:
        expr = f"row < {self.n_rows} and gone > {self.generation}"
        if langs:
            codes = ", ".join(f'"{x}"' for x in langs if x.isalnum())  # codes are ISO letters: nothing to escape
            expr += f" and lang in [{codes}]"
        return expr

    def search(self, q, k, ef_search=None, nprobe=None, langs=None):
        """The ``k`` nearest rows by Milvus's search. A search for every row of a small index (``/diagnose``
        ranks whole pools) is a full scan whatever Milvus does, and a search's cost grows with the hits it
        returns (milvus-lite: 8 ms for 10 hits, 55 ms for 480): such a search is the product of the query
        with the generation's vectors, fetched from Milvus once (exact, as a FLAT index's)."""
        q = V.normalise(q)
        if k >= self._size and self._size <= SCAN_ROWS:
            return self._full_scan(q, k, langs)
        k = max(1, min(k, self.n_rows))
        params = {"metric_type": "IP", "params": {"ef": max(ef_search or 0, k)} if ef_search else {}}
        if nprobe:
            params["params"]["nprobe"] = nprobe
        res = self.client.search(self.collection, data=q.tolist(), limit=k, filter=self._filter(langs),
                                 search_params=params, output_fields=[])  # fmt: skip
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        rows = np.full((len(q), k), -1, dtype=np.int64)
        for i, hits in enumerate(res):
            for j, h in enumerate(hits[:k]):
                scores[i, j], rows[i, j] = h["distance"], h["row"]
        return scores, rows

    def _full_scan(self, q: np.ndarray, k: int, langs):
        if self._scan is None:  # two racing requests fetch the same rows: no lock needed
            got = self.client.query(self.collection, filter=self._filter(None), limit=SCAN_ROWS,
                                    output_fields=["row", "lang", "vector"])  # fmt: skip
            got.sort(key=lambda g: g["row"])
            rows = np.asarray([g["row"] for g in got], dtype=np.int64)
            vecs = np.asarray([g["vector"] for g in got], dtype=np.float32).reshape(len(got), self.dim)
            self._scan = rows, np.asarray([g["lang"] for g in got], dtype=object), vecs
        rows, row_langs, vecs = self._scan
        if langs:
            keep = np.isin(row_langs, list(langs))
            rows, vecs = rows[keep], vecs[keep]
        k = max(1, min(k, self._size))  # as a store search: at most the index's size, -1 past the rows found
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        out = np.full((len(q), k), -1, dtype=np.int64)
        sims = q @ vecs.T
        order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
        m = order.shape[1]
        scores[:, :m], out[:, :m] = np.take_along_axis(sims, order, axis=1), rows[order]
        return scores, out

    def vectors(self, rows):
        got = self.client.get(self.collection, ids=[int(r) for r in rows], output_fields=["vector"])
        by_row = {g["row"]: g["vector"] for g in got}
        if len(by_row) != len(set(rows)):
            return None
        return np.asarray([by_row[int(r)] for r in rows], dtype=np.float32).reshape(len(rows), self.dim)

    def close(self) -> None:
        self.client.close()
