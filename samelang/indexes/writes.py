"""Writing an index: build, add, delete and export (re-embed: :mod:`.reembed`), each a new complete
generation beside the live one, switched in with one atomic rename under the writer lock
(:mod:`.generations`), so that a crash at any point leaves the previous generation loadable and a running
server never sees half a write. The embedding model and the analyzer of the lexical half are callables
given by the caller."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from samelang.corpora.records import Document
from samelang.indexes import vectors as V
from samelang.indexes.docstore import DocStore, StoredDoc
from samelang.indexes.generations import (
    CURRENT,
    FORMAT_VERSION,
    READERS,
    IndexNotFound,
    current_generation,
    gen_name,
    gen_number,
    n_rows,
    read_index_manifest,
    remove_unread_generations,
    writer_lock,
)
from samelang.indexes.index import check_analyzer, check_model, open_index
from samelang.indexes.lexical import FOLDER as LEXICAL
from samelang.indexes.lexical import K1, Analyzer, B, LexicalIndex
from samelang.indexes.stores import MILVUS_SCHEMA, MilvusStore, StoreSpec, milvus_client
from samelang.primitives.atomic import atomic_dir, atomic_write_text
from samelang.primitives.identity import ModelInfo

Embed = Callable[[list[str]], np.ndarray]


def _corpus_checksum(docs: DocStore) -> str:
    h = hashlib.sha256()
    for doc_id, text in docs.id_text_rows():
        h.update(doc_id.encode())
        h.update(b"\0")
        h.update(hashlib.sha256(text.encode()).digest())
    return h.hexdigest()


def _prepare_docs(
    docs: Sequence[Document], first_row: int, detect: Callable[[list[str]], list] | None
) -> list[StoredDoc]:
    missing = [i for i, d in enumerate(docs) if not d.lang]
    detected = {}
    if missing:
        if detect is None:
            raise ValueError(f"{len(missing)} documents have no 'lang' and no language identifier was given")
        for i, det in zip(missing, detect([docs[i].text for i in missing])):
            detected[i] = det
    out = []
    for i, d in enumerate(docs):
        if i in detected:
            det = detected[i]
            lang, source, conf = (det.lang, "detected", det.confidence) if det else (None, "detected", 0.0)
        else:
            lang, source, conf = d.lang, "given", None
        out.append(StoredDoc(first_row + i, d.id, d.text, lang, source, conf, d.group, dict(d.metadata)))
    return out


def _embed_all(texts: list[str], embed: Embed, dim: int, batch_size: int, desc: str) -> np.ndarray:
    out = np.zeros((len(texts), dim), dtype=np.float32)
    # longest first: batches of similar length waste no padding, and the slowest batch shows up early
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    with tqdm(total=len(texts), desc=desc, unit="doc", disable=False) as bar:
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            vecs = np.asarray(embed([texts[i] for i in idx]), dtype=np.float32)
            if vecs.shape != (len(idx), dim):
                raise ValueError(f"the embedding function returned shape {vecs.shape}, expected ({len(idx)}, {dim})")
            out[idx] = vecs
            bar.update(len(idx))
    return out


def _check_unique(docs: Sequence[Document]) -> None:
    seen = set()
    for d in docs:
        if d.id in seen:
            raise ValueError(f"duplicate document id {d.id!r}")
        seen.add(d.id)


def _write_generation(
    gen_dir: Path,
    index,
    store_src: Path | None,
    new_docs: list[StoredDoc],
    manifest: dict,
    analyze: Analyzer | None = None,
    drop_rows: Sequence[int] = (),
) -> dict:
    """Write a complete generation into ``gen_dir`` (a scratch folder): the docstore (``store_src``'s
    rows less ``drop_rows``, plus ``new_docs``), the FAISS ``index`` (``None`` for a Milvus store,
    written to before), the manifest; with ``analyze``, its lexical half over every text of the
    generation (named in ``manifest["lexical"]``), by row."""
    db_path = gen_dir / "docs.sqlite"
    if store_src is not None:
        shutil.copyfile(store_src, db_path)
    store = DocStore(db_path)
    try:
        store.delete_rows(list(drop_rows))
        store.add(new_docs)
        manifest = dict(manifest)
        manifest["n_docs"] = len(store)
        manifest["n_rows"] = max(n_rows(manifest) if "n_docs" in manifest else 0, store.max_row() + 1)
        manifest["counts_per_lang"] = store.lang_counts()
        manifest["corpus_sha256"] = _corpus_checksum(store)
        if analyze is not None:
            texts = store.texts(manifest["n_rows"])
            (gen_dir / LEXICAL).mkdir()
            LexicalIndex.build(texts, analyze, manifest["lexical"]["analyzer"]).save(gen_dir / LEXICAL)
    finally:
        store.close()
    if index is not None:  # FAISS; a Milvus store got its rows before (samelang.indexes.stores)
        if manifest["n_docs"] != index.ntotal:
            raise RuntimeError(f"docstore has {manifest['n_docs']} documents but FAISS {index.ntotal}")
        V.write(index, gen_dir / "vectors.faiss")
    (gen_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
    return manifest


def build_index(
    out: Path,
    docs: Sequence[Document],
    embed: Embed,
    model: ModelInfo,
    spec: V.IndexSpec = V.IndexSpec(),
    detect: Callable[[list[str]], list] | None = None,
    batch_size: int = 32,
    source: str = "",
    analyzer: tuple[str, Analyzer] | None = None,
    store: StoreSpec = StoreSpec(),
) -> dict:
    """Embed ``docs`` and write a fresh index at ``out`` (replacing any old one atomically);
    ``analyzer`` = (name, function) adds the lexical half (BM25) for hybrid retrieval; ``store``: where
    the vectors go (FAISS in the folder, or a new Milvus collection)."""
    if not docs:
        raise ValueError("no documents to index")
    _check_unique(docs)
    stored = _prepare_docs(docs, 0, detect)
    vecs = _embed_all([d.text for d in docs], embed, model.dim, batch_size, "embedding documents")
    build_id = uuid.uuid4().hex  # a rebuild restarts at generation 1: readers tell builds apart by this
    index, record = _new_store(store, spec, model.dim, vecs, build_id)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest = {
        "format_version": FORMAT_VERSION,
        "embedding_model": {"name": model.name, "fingerprint": model.fingerprint},
        "dim": model.dim,
        "metric": "inner_product on L2-normalised vectors (cosine)",
        "index": spec.to_dict(),
        "source": source,
        "built_at": now,
        "updated_at": now,
        "build_id": build_id,
        "generation": 1,
        "store": record,
    }
    if analyzer is not None:
        manifest["lexical"] = _lexical_record(analyzer[0])
    with writer_lock(out), _replacing(Path(out), record) as tmp:
        _fill_milvus(record, spec, model.dim, vecs, stored)
        gen = tmp / gen_name(1)
        gen.mkdir()
        manifest = _write_generation(gen, index, None, stored, manifest, analyzer[1] if analyzer else None)
        (tmp / CURRENT).write_text(gen.name)
    return manifest


@contextmanager
def _replacing(out: Path, record: dict) -> Iterator[Path]:
    """:func:`atomic_dir` for a new build at ``out`` whose vectors are ``record``'s, minding Milvus: a
    build that fails drops the collection it made; one that commits drops the collection of the build it
    replaced, unless a reader (a server) still holds that build, which is then told to the user."""
    try:
        old = (read_index_manifest(out).get("store") or {}) if (out / CURRENT).exists() else {}
    except (IndexNotFound, OSError, ValueError):
        old = {}
    old = old if old.get("kind") == "milvus" else None
    # a reader holds its generation's READERS: these descriptors are held across the swap to ask it after
    fds = [os.open(g / READERS, os.O_CREAT | os.O_RDWR, 0o644) for g in out.glob("gen-*") if g.is_dir()] if old else []
    try:
        try:
            with atomic_dir(out) as tmp:
                yield tmp
        except BaseException:
            if record["kind"] == "milvus":
                with contextlib.suppress(Exception):  # Milvus may be what failed
                    milvus_client(record["uri"]).drop_collection(record["collection"])
            raise
        if old is not None:
            _drop_unread_collection(old, fds)
    finally:
        for fd in fds:
            os.close(fd)


def _drop_unread_collection(rec: dict, fds: list[int]) -> None:
    for fd in fds:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            drop = f"MilvusClient('{rec['uri']}').drop_collection('{rec['collection']}')"
            print(f"samelang: the replaced build's Milvus collection {rec['collection']} at {rec['uri']} is kept: "
                  f"a server still reads it. Drop it once none does: python -c \"from pymilvus import MilvusClient; "
                  f"{drop}\"", file=sys.stderr)  # fmt: skip
            return
    with contextlib.suppress(Exception):  # gone already, or that Milvus is not reachable from here
        client = milvus_client(rec["uri"])
        if client.has_collection(rec["collection"]):
            client.drop_collection(rec["collection"])


def _new_store(store: StoreSpec, spec: V.IndexSpec, dim: int, vecs: np.ndarray, build_id: str, rows=None):
    """(FAISS index holding ``vecs`` at ``rows`` (default 0..), or ``None`` for Milvus, and the manifest's
    store record)."""
    if store.kind == "milvus":
        return None, {"kind": "milvus", "uri": store.resolved_uri(), "collection": f"samelang_{build_id}",
                      "schema": MILVUS_SCHEMA}  # fmt: skip
    index = V.new_index(spec, dim, train_vectors=vecs)
    V.add_vectors(index, vecs, np.arange(len(vecs)) if rows is None else np.asarray(rows))
    return index, {"kind": "faiss"}


def _fill_milvus(record: dict, spec: V.IndexSpec, dim: int, vecs: np.ndarray, stored: list[StoredDoc]) -> None:
    """A new build's Milvus collection, with its rows (a no-op for a FAISS record)."""
    if record["kind"] == "milvus":
        MilvusStore.create(record["uri"], record["collection"], dim, spec)
        _upsert(record, vecs, stored)


def _upsert(record: dict, vecs: np.ndarray, stored: list[StoredDoc]) -> None:
    MilvusStore.upsert(record["uri"], record["collection"], vecs, [d.row for d in stored], [d.lang for d in stored],
                       [d.group for d in stored])  # fmt: skip


def _lexical_record(name: str) -> dict:
    return {"analyzer": name, "scoring": "bm25 (lucene)", "k1": K1, "b": B}


def add_documents(
    path: Path,
    docs: Sequence[Document],
    embed: Embed,
    model: ModelInfo,
    detect: Callable[[list[str]], list] | None = None,
    batch_size: int = 32,
    wait: bool = True,
    analyzer: tuple[str, Analyzer] | None = None,
    uri: str | None = None,
) -> dict:
    """Add documents to an existing index without rebuilding it (crash-safe; concurrent writers
    take turns, see the module docstring). An index with a lexical half needs its ``analyzer``
    (name, function): BM25 is rebuilt over all texts, since document frequencies change. ``uri``: where a
    Milvus-stored index's Milvus is reached from here (default: its manifest's)."""
    path = Path(path)
    current_generation(path)  # a clear error before waiting for a lock on nothing
    if not docs:
        raise ValueError("no documents to add")
    _check_unique(docs)
    with writer_lock(path, wait=wait):
        return _add_locked(path, docs, embed, model, detect, batch_size, analyzer, uri)


def _add_locked(path, docs, embed, model, detect, batch_size, analyzer=None, uri=None) -> dict:
    gen = current_generation(path)
    manifest = json.loads((gen / "manifest.json").read_text())
    check_model(manifest, model, path)
    analyze = check_analyzer(manifest, analyzer, path)
    old_store = DocStore(gen / "docs.sqlite", readonly=True)
    try:
        clash = old_store.existing_ids([d.id for d in docs])
    finally:
        old_store.close()
    if clash:
        raise ValueError(f"{len(clash)} document ids are already in the index, e.g. {sorted(clash)[:3]}")
    first_row = n_rows(manifest)  # never a deleted row's: an older generation may still read it
    stored = _prepare_docs(docs, first_row, detect)
    vecs = _embed_all([d.text for d in docs], embed, model.dim, batch_size, "embedding new documents")
    record = _milvus_here(manifest, gen, uri)
    if record is not None:  # rows past the live generation's size: invisible until the switch
        index = None
        _upsert(record, vecs, stored)
    else:
        index = V.read(gen / "vectors.faiss")
        V.add_vectors(index, vecs, np.arange(first_row, first_row + len(docs)))
    return _commit(path, gen, manifest, index, stored, analyze, (), record)


def _milvus_here(manifest: dict, gen: Path, uri: str | None) -> dict | None:
    """A writer's view of a Milvus-stored generation (``None`` for FAISS): its store record at ``uri``,
    after reviving the rows that a crashed delete marked (:meth:`MilvusStore.revive`)."""
    record = manifest.get("store") or {"kind": "faiss"}
    if record["kind"] != "milvus":
        return None
    record = {**record, "uri": uri or record["uri"]}
    MilvusStore.revive(record["uri"], record["collection"], int(manifest["generation"]))
    return record


def _commit(path: Path, gen: Path, manifest: dict, index, stored: list[StoredDoc], analyze, drop_rows,
            milvus: dict | None) -> dict:  # fmt: skip
    """Write the generation after ``gen`` (crash-safe: a scratch folder renamed, then ``CURRENT`` switched),
    remove the generations nobody reads, and the Milvus rows that no generation left can see."""
    number = gen_number(gen) + 1
    manifest = dict(manifest, generation=number, updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    scratch = path / f".{gen_name(number)}.tmp-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        manifest = _write_generation(scratch, index, gen / "docs.sqlite", stored, manifest, analyze, drop_rows)
        new_gen = path / gen_name(number)
        if new_gen.exists():  # left by a crash after its rename but before the switch
            shutil.rmtree(new_gen)
        scratch.rename(new_gen)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    atomic_write_text(path / CURRENT, new_gen.name)  # the commit point
    remove_unread_generations(path, keep=new_gen.name)
    for stale in path.glob(".gen-*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if milvus is not None:
        oldest = min(gen_number(g) for g in path.glob("gen-*") if g.is_dir())
        MilvusStore.purge(milvus["uri"], milvus["collection"], oldest)
    return manifest


def delete_documents(
    path: Path,
    ids: Sequence[str],
    analyzer: tuple[str, Analyzer] | None = None,
    wait: bool = True,
    uri: str | None = None,
) -> dict:
    """Delete documents by id, as a new generation (crash-safe, as :func:`add_documents`): their texts
    leave the docstore (the ids can be added again), their vectors leave the store (FAISS: removed, an
    HNSW graph rebuilt from the stored vectors; Milvus: marked deleted from this generation, purged once
    no generation sees them), BM25 is rebuilt. Nothing is embedded again. Every id must be in the index."""
    path = Path(path)
    current_generation(path)
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise ValueError("no document ids to delete")
    with writer_lock(path, wait=wait):
        gen = current_generation(path)
        manifest = json.loads((gen / "manifest.json").read_text())
        analyze = check_analyzer(manifest, analyzer, path)
        docs = DocStore(gen / "docs.sqlite", readonly=True)
        try:
            rows = docs.rows_for_ids(ids)
        finally:
            docs.close()
        missing = [i for i in ids if i not in rows]
        if missing:
            raise ValueError(f"{len(missing)} of {len(ids)} ids are not in the index (nothing deleted), "
                             f"e.g. {missing[:3]}")  # fmt: skip
        drop = sorted(rows.values())
        record = _milvus_here(manifest, gen, uri)
        if record is not None:  # marked gone from the next generation: older readers still see them
            index = None
            MilvusStore.delete(record["uri"], record["collection"], drop, int(manifest["generation"]) + 1)
        else:
            index = V.remove_rows(V.read(gen / "vectors.faiss"), drop)
        return _commit(path, gen, manifest, index, [], analyze, drop, record)


def export_index(src: Path, out: Path, store: StoreSpec) -> dict:
    """A copy of the index at ``src`` whose vectors are in ``store`` (e.g. a FAISS index moved into
    Milvus): the same documents, rows, lexical half and model; the vectors are the stored ones, not
    embedded again. ``out`` is written atomically, as a build."""
    src = Path(src)
    gen = current_generation(src)
    manifest = json.loads((gen / "manifest.json").read_text())
    opened = open_index(src)
    try:
        rows, dim = opened.docs.rows(), int(manifest["dim"])
        vecs = opened.vectors(rows)
        if vecs is None:
            raise ValueError(f"the index at {src} cannot give its vectors back (a GPU copy or an IVF index without "
                             "a direct map): build the new one with `samelang index build --store ...`")  # fmt: skip
        stored = opened.docs.get_rows(rows)
    finally:
        opened.close()
    build_id = uuid.uuid4().hex
    spec = V.IndexSpec(**manifest["index"])
    index, record = _new_store(store, spec, dim, vecs, build_id, rows)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest = dict(manifest, build_id=build_id, generation=1, store=record, updated_at=now, exported_from=str(src))
    with writer_lock(out), _replacing(Path(out), record) as tmp:
        _fill_milvus(record, spec, dim, vecs, stored)
        new = tmp / gen_name(1)
        new.mkdir()
        shutil.copyfile(gen / "docs.sqlite", new / "docs.sqlite")
        if (gen / LEXICAL).is_dir():
            shutil.copytree(gen / LEXICAL, new / LEXICAL)
        if index is not None:
            V.write(index, new / "vectors.faiss")
        (new / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
        (tmp / CURRENT).write_text(new.name)
    return manifest
