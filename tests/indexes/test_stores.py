"""The same index behaviour on both vector stores: FAISS in the folder, and Milvus (milvus-lite, the
embedded Milvus with the client API of a Milvus server). Hits, the language filter, group-aware
candidates, add without rebuild, a crash during add, and the same top-10 on XQuAD queries."""

from __future__ import annotations

import numpy as np
import pytest

from indexes.corpora import Document, load_xquad
from indexes.index import add_documents, build_index, open_index
from indexes.stores import StoreSpec

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
    from indexes.langid import get_identifier
    from service.models.generation import NoGenerator
    from service.models.reranker import CosineReranker
    from service.pipeline import Limits, Pipeline

    return Pipeline(encoder, open_index(path, encoder.info), CosineReranker(encoder), NoGenerator(), get_identifier(),
                    Limits())  # fmt: skip


@pytest.mark.parametrize("kind", STORES)
def test_hits_language_filter_and_groups(built, encoder, xquad, kind):
    from service.pipeline import SearchOptions

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
    import indexes.index as I

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
