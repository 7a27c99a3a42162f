"""The same index behaviour on both vector stores: FAISS in the folder, and Milvus (milvus-lite, the
embedded Milvus with the client API of a Milvus server). Hits, the language filter, group-aware
candidates, add without rebuild, a crash during add, deletion, and the same top-10 on XQuAD queries."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.corpora import Document, load_xquad
from samelang.indexes.index import open_index
from samelang.indexes.stores import StoreSpec
from samelang.indexes.writes import add_documents, build_index

pytest.importorskip("pymilvus", reason="the Milvus store is the extra 'milvus': pip install -e '.[milvus]'")

STORES = ["faiss", "milvus"]


def spec(kind: str, tmp_path) -> StoreSpec:
    return StoreSpec(kind, str(tmp_path / "milvus.db") if kind == "milvus" else None)


@pytest.fixture(scope="module")
def xquad():
    return load_xquad(["en", "de", "zh"], split="test")


@pytest.fixture(scope="module")
def docs(xquad):
    return xquad.documents()  # 80 paragraphs in each of en, de, zh (groups: one per paragraph)


@pytest.fixture(scope="module")
def built(tmp_path_factory, encoder, docs):
    """One index per store over the same documents (embedded once)."""
    vecs = encoder.encode_passages([d.text for d in docs])
    by_text = {d.text: v for d, v in zip(docs, vecs)}

    def embed(texts):
        return np.stack([by_text[t] if t in by_text else encoder.encode_passages([t])[0] for t in texts])

    out = {}
    for kind in STORES:
        path = tmp_path_factory.mktemp(kind)
        build_index(path / "index", docs, embed, encoder.info, store=spec(kind, path))
        out[kind] = path / "index"
    return out


def pipeline_over(path, encoder):
    from samelang.core.models.cross_encoder import CosineReranker
    from samelang.core.models.generation import NoGenerator
    from samelang.primitives.langid import get_identifier
    from samelang.retrieval.limits import Limits
    from samelang.retrieval.pipeline import Pipeline

    return Pipeline(encoder, open_index(path, encoder.info), CosineReranker(encoder), NoGenerator(), get_identifier(),
                    Limits())  # fmt: skip


@pytest.mark.parametrize("kind", STORES)
def test_hits_language_filter_and_groups(built, encoder, xquad, kind):
    from samelang.retrieval.options import SearchOptions

    pipe = pipeline_over(built[kind], encoder)
    assert pipe.index.manifest["store"]["kind"] == kind and pipe.index.size == 240
    q = next(q for q in xquad.questions if q.lang == "de")
    hits = pipe.search(q.text, SearchOptions(k=10, group_candidates=False, lexical_weight=0.0)).hits
    assert hits[0].doc.group == q.group and len({h.doc.row for h in hits}) == 10
    only = pipe.search(q.text, SearchOptions(k=10, langs=("zh",), group_candidates=False, lexical_weight=0.0)).hits
    assert len(only) == 10 and {h.doc.lang for h in only} == {"zh"} and only[0].doc.group == q.group
    grouped = pipe.search(q.text, SearchOptions(k=10, group_candidates=True, lexical_weight=0.0)).hits
    assert len({h.doc.group for h in grouped}) == 10 and grouped[0].doc.lang == "de"
    assert sorted(v.lang for v in grouped[0].versions) == ["en", "zh"]
    pipe.index.close()


def test_faiss_and_milvus_give_the_same_top_10(built, encoder, xquad):
    """Exact search on both: the same rows in the same order for 60 XQuAD questions in three languages
    (ties aside: cosines equal to 1e-6 may swap)."""
    qs = [q.text for lang in ("en", "de", "zh") for q in xquad.questions if q.lang == lang][::20][:60]
    qv = encoder.encode_queries(qs)
    f, m = open_index(built["faiss"], encoder.info), open_index(built["milvus"], encoder.info)
    fs, fr = f.search(qv, 10)
    ms, mr = m.search(qv, 10)
    np.testing.assert_allclose(fs, ms, atol=1e-5)
    swapped = [(i, j) for i in range(len(qs)) for j in range(10) if fr[i, j] != mr[i, j]]
    assert all(abs(fs[i, j] - ms[i, j]) < 1e-5 for i, j in swapped)
    assert len(swapped) <= 2, swapped
    # the stored vectors come back too (the hybrid search and the cosine reranker read them)
    rows = [0, 17, 239]
    np.testing.assert_allclose(f.vectors(rows), m.vectors(rows), atol=1e-6)
    f.close(), m.close()


@pytest.mark.parametrize("kind", STORES)
def test_add_without_rebuild_and_a_crash_before_the_switch(tmp_path, encoder, docs, kind, monkeypatch):
    import samelang.indexes.writes as I

    path = tmp_path / "index"
    build_index(path, docs[:20], encoder.encode_passages, encoder.info, store=spec(kind, tmp_path))
    new = [Document("louvre-fr", "Le Louvre est le plus grand musée d'art du monde.", "fr", "louvre"),
           Document("louvre-en", "The Louvre is the world's largest art museum.", "en", "louvre")]  # fmt: skip

    class Crash(Exception):
        pass

    def crash(*a, **k):
        raise Crash

    # a crash after the new vectors are written (Milvus: upserted) but before CURRENT switches
    monkeypatch.setattr(I, "atomic_write_text", crash)
    with pytest.raises(Crash):
        add_documents(path, new, encoder.encode_passages, encoder.info)
    monkeypatch.undo()
    idx = open_index(path, encoder.info)
    assert idx.generation == "gen-000001" and idx.size == 20
    scores, rows = idx.search(encoder.encode_queries(["le plus grand musée d'art"]), 25)
    assert set(rows[0].tolist()) <= set(range(20))  # the crashed add's vectors are not seen
    idx.close()
    m = add_documents(path, new, encoder.encode_passages, encoder.info)
    assert m["n_docs"] == 22 and m["generation"] == 2
    idx = open_index(path, encoder.info)
    scores, rows = idx.search(encoder.encode_queries(["le plus grand musée d'art"]), 2)
    assert set(rows[0].tolist()) == {20, 21} and idx.size == 22
    idx.close()


def test_a_faiss_index_moves_into_milvus(tmp_path, built, encoder, base_model_path, samelang_home):
    """``samelang index export --to milvus``: the same documents and vectors, searched alike; nothing
    is embedded again."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home), "PYTHONPATH": str(repo)}
    out, uri = tmp_path / "moved", tmp_path / "moved.db"
    cmd = [sys.executable, "-m", "samelang", "index", "export", str(built["faiss"]), "--out", str(out), "--to",
           "milvus", "--uri", str(uri)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["store"]["kind"] == "milvus"
    f, m = open_index(built["faiss"], encoder.info), open_index(out, encoder.info)
    assert m.size == f.size == 240 and m.manifest["exported_from"] == str(built["faiss"])
    np.testing.assert_allclose(m.vectors(list(range(240))), f.vectors(list(range(240))), atol=1e-6)
    qv = encoder.encode_queries(["Who founded the museum?", "谁建立了博物馆？"])
    assert (f.search(qv, 5)[1] == m.search(qv, 5)[1]).all()
    assert (m.lexical is None) == (f.lexical is None) and m.docs.get_rows([7])[0].text == f.docs.get_rows([7])[0].text
    f.close(), m.close()


@pytest.mark.parametrize("kind", STORES)
def test_delete_without_rebuild_a_crash_before_the_switch_and_the_ids_added_again(tmp_path, encoder, docs, kind,
                                                                                   monkeypatch):  # fmt: skip
    import samelang.indexes.writes as I
    from samelang.indexes.writes import delete_documents

    path, analyzer = tmp_path / "index", encoder.analyzer
    build_index(path, docs[:20], encoder.encode_passages, encoder.info, analyzer=analyzer, store=spec(kind, tmp_path))
    qv = encoder.encode_queries([docs[3].text[:300], docs[17].text[:300]])

    def top1(expect_docs: int) -> list[int]:
        idx = open_index(path, encoder.info)
        try:
            assert idx.documents == expect_docs
            return idx.search(qv, 1)[1][:, 0].tolist()
        finally:
            idx.close()

    assert top1(20) == [3, 17]  # each paragraph finds itself
    gone = [docs[3].id, docs[17].id]

    class Crash(Exception):
        pass

    def crash(*a, **k):
        raise Crash

    monkeypatch.setattr(I, "atomic_write_text", crash)  # the delete's marks are written, CURRENT is not switched
    with pytest.raises(Crash):
        delete_documents(path, gone, analyzer=analyzer)
    monkeypatch.undo()
    assert top1(20) == [3, 17]  # the crashed delete is not seen
    # the next writer revives what the crashed delete marked (Milvus): its generation keeps the documents
    add_documents(path, [Document("extra", "Ein ganz anderer Text über Schiffe.", "de")], encoder.encode_passages,
                  encoder.info, analyzer=analyzer)  # fmt: skip
    assert top1(21) == [3, 17]

    if kind == "milvus":  # as a writer in a fresh process finds it (milvus-lite: reads need a loaded collection)
        from pymilvus import MilvusClient

        rec = I.read_index_manifest(path)["store"]
        MilvusClient(rec["uri"]).release_collection(rec["collection"])
    m = delete_documents(path, gone, analyzer=analyzer)
    assert (m["n_docs"], m["n_rows"], m["generation"]) == (19, 21, 3)
    idx = open_index(path, encoder.info)
    scores, rows = idx.search(qv, 21)
    found = set(rows[rows >= 0].tolist())
    assert found == set(range(21)) - {3, 17} and idx.size == 21  # every other document, none of the deleted
    assert idx.docs.get_rows([3, 17]) == [None, None] and idx.docs.existing_ids(gone) == set()
    lex = idx.lexical.scores(analyzer[1](docs[3].text))
    assert len(lex) == 21 and lex[3] == 0 and lex[17] == 0  # BM25 by row, without the deleted texts
    idx.close()
    with pytest.raises(ValueError, match="not in the index"):
        delete_documents(path, gone, analyzer=analyzer)
    _served_without(path, encoder, docs, gone)

    # an id can come back: a new row (a deleted row is never given again)
    add_documents(path, [docs[3]], encoder.encode_passages, encoder.info, analyzer=analyzer)
    first, second = top1(20)
    assert first == 21 and second != 17
    if kind == "milvus":  # no generation on disk sees rows 3 and 17 any more: they left the collection
        from pymilvus import MilvusClient

        rec = I.read_index_manifest(path)["store"]
        client = MilvusClient(rec["uri"])
        left = client.query(rec["collection"], filter="row in [3, 17]", output_fields=["row"])
        client.close()
        assert left == []


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_removing_rows_from_each_faiss_kind_keeps_every_other_row(kind):
    """A flat index removes rows in place; IVF and HNSW are refilled with the vectors that stay, under
    the same ids."""
    from samelang.indexes import vectors as V

    x = V.normalise(np.random.default_rng(0).standard_normal((200, 16)))
    spec_ = V.IndexSpec(kind=kind, ivf_nlist=4)
    index = V.new_index(spec_, 16, train_vectors=x)
    V.add_vectors(index, x, np.arange(200))
    index = V.remove_rows(index, [5, 7, 199])
    V.set_search_params(index, ef_search=400, nprobe=4)
    scores, rows = index.search(x[[6, 5]], 200)
    assert index.ntotal == 197 and set(rows[0][rows[0] >= 0].tolist()) == set(range(200)) - {5, 7, 199}
    assert rows[0, 0] == 6 and abs(scores[0, 0] - 1) < 1e-5 and rows[1, 0] != 5


def test_a_rebuild_drops_the_collection_it_replaces_unless_a_reader_holds_it(tmp_path, encoder, docs, capfd,
                                                                              monkeypatch):  # fmt: skip
    from pymilvus import MilvusClient

    import samelang.indexes.writes as I

    path, store = tmp_path / "index", spec("milvus", tmp_path)

    def build() -> str:
        return build_index(path, docs[:10], encoder.encode_passages, encoder.info, store=store)["store"]["collection"]

    def collections() -> set[str]:
        client = MilvusClient(store.resolved_uri())
        try:
            return set(client.list_collections())
        finally:
            client.close()

    first = build()
    second = build()  # nobody reads the first build
    assert collections() == {second}
    reader = open_index(path, encoder.info)
    third = build()  # a server still reads the second: kept, and said so
    assert collections() == {second, third} and f"collection {second}" in capfd.readouterr().err
    reader.close()
    assert first not in collections()

    def fail(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(I, "_write_generation", fail)  # a build that fails after its rows went into Milvus
    with pytest.raises(RuntimeError, match="disk full"):
        build()
    assert collections() == {second, third} and open_index(path, encoder.info).manifest["store"]["collection"] == third


def _served_without(path, encoder, docs, gone):
    """What a server gives over an index with deleted documents: hybrid, group-aware /search never shows
    them, and /diagnose's pool is the documents left."""
    from samelang.core.metrics.audit import LabelledQuery
    from samelang.retrieval.diagnosis import diagnose
    from samelang.retrieval.options import SearchOptions

    pipe = pipeline_over(path, encoder)
    hits = pipe.search(docs[3].text[:300], SearchOptions(k=25, lexical_weight=0.3)).hits
    shown = {v for h in hits for v in [h.doc.id, *(x.id for x in h.versions)]}
    assert len(hits) == 19 and not shown & set(gone)
    q = LabelledQuery(docs[4].text[:300], docs[4].lang, docs[4].group, (docs[4].id,), docs[4].id)
    d = diagnose(pipe, [q], None, SearchOptions(k=10), "queries")
    assert d["pool_size"] == 19 and d["k"] == 19 and d["queries"][0]["ranks"] == {docs[4].id: 1}
    pipe.index.close()
