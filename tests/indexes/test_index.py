"""The on-disk index: FAISS kinds, docstore consistency, manifest checks, add, crash safety.

Vectors come from the real converted base model (``encoder`` fixture); the
``indexes`` package itself only ever sees an embedding callable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from samelang.corpora import Document, load_xquad
from samelang.indexes.generations import IndexModelMismatch, IndexNotFound
from samelang.indexes.index import index_info, open_index
from samelang.indexes.vectors import IndexSpec
from samelang.indexes.writes import add_documents, build_index
from samelang.primitives.identity import ModelInfo
from samelang.primitives.langid import get_identifier

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def docs():
    x = load_xquad(["en", "de"], split="test")
    return x.documents()[:30] + x.documents()[80:110]  # 30 en + 30 de paragraphs


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_build_and_search_every_kind(tmp_path, encoder, docs, kind):
    manifest = build_index(tmp_path / kind, docs, encoder.encode_passages, encoder.info, IndexSpec(kind=kind))
    assert manifest["n_docs"] == 60 and manifest["counts_per_lang"] == {"en": 30, "de": 30}
    assert manifest["embedding_model"]["fingerprint"] == encoder.fingerprint and manifest["index"]["kind"] == kind
    idx = open_index(tmp_path / kind, encoder.info)
    q = encoder.encode_queries(["Which paragraph talks about " + docs[5].text[:80]])
    scores, rows = idx.search(q, 5, ef_search=64, nprobe=4)
    assert rows.shape == (1, 5) and (np.diff(scores[0]) <= 1e-6).all()
    top = idx.docs.get_rows(rows[0].tolist())
    assert top[0].group == docs[5].group  # its own paragraph (either language) comes first
    idx.close()


def test_model_mismatch_is_refused_with_a_rebuild_hint(tmp_path, encoder, docs):
    build_index(tmp_path / "i", docs[:5], encoder.encode_passages, encoder.info)
    other = ModelInfo("aligned-e5", "f" * 64, encoder.dim)
    with pytest.raises(IndexModelMismatch) as e:
        open_index(tmp_path / "i", other)
    msg = str(e.value)
    assert encoder.name in msg and "aligned-e5" in msg and "samelang index build" in msg
    with pytest.raises(IndexNotFound, match="samelang index build"):
        open_index(tmp_path / "missing", encoder.info)


def test_add_documents_keeps_docstore_and_faiss_consistent(tmp_path, encoder, docs):
    path = tmp_path / "i"
    build_index(path, docs[:40], encoder.encode_passages, encoder.info)
    new = [
        Document("u1", "Le musée du Louvre est le plus grand musée d'art du monde.", None, "louvre", {"src": "user"}),
        Document("u2", "The Louvre is the world's largest art museum.", "en", "louvre"),
    ]
    m = add_documents(path, new, encoder.encode_passages, encoder.info, lambda t: get_identifier().detect_many(t))
    assert m["n_docs"] == 42 and m["generation"] == 2
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "gen-000002"]
    idx = open_index(path, encoder.info)
    assert idx.size == 42
    u1 = idx.docs.get_rows([40])[0]
    assert (u1.id, u1.lang, u1.lang_source, u1.metadata) == ("u1", "fr", "detected", {"src": "user"})
    assert u1.lang_confidence > 0.5
    scores, rows = idx.search(encoder.encode_queries(["plus grand musée d'art"]), 2)
    assert set(rows[0].tolist()) == {40, 41}
    idx.close()
    with pytest.raises(ValueError, match="already in the index"):
        add_documents(path, new[:1], encoder.encode_passages, encoder.info)
    with pytest.raises(IndexModelMismatch):
        add_documents(path, new, encoder.encode_passages, ModelInfo("x", "0" * 64, encoder.dim))
    info = index_info(path)
    assert info["live_generation"] == "gen-000002" and info["size_bytes"] > 0


CRASH = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import samelang.indexes.writes as I
    from samelang.corpora import Document
    from samelang.core.models.encoder import Encoder

    step = sys.argv[2]
    if step == "before-switch":   # new generation fully written, CURRENT not yet switched
        I.atomic_write_text = lambda *a, **k: os._exit(9)
    elif step == "mid-write":     # docstore copied and extended, FAISS file not yet written
        I.V.write = lambda *a, **k: os._exit(9)
    enc = Encoder(sys.argv[3], home=Path(sys.argv[4]))
    I.add_documents(Path(sys.argv[1]), [Document("new", "A brand new document.", "en")], enc.encode_passages, enc.info)
    """
)


@pytest.mark.parametrize("step", ["mid-write", "before-switch"])
def test_a_crash_halfway_leaves_the_old_index_usable(tmp_path, encoder, docs, step, samelang_home):
    path = tmp_path / "i"
    build_index(path, docs[:10], encoder.encode_passages, encoder.info)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", CRASH, str(path), step, str(encoder.path), str(samelang_home)]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr[-2000:]
    idx = open_index(path, encoder.info)  # the old generation is still the live one
    assert idx.generation == "gen-000001" and idx.size == 10 and idx.docs.rows_for_ids(["new"]) == {}
    idx.close()
    # and the next add succeeds, clearing the debris
    m = add_documents(path, [Document("new", "A brand new document.", "en")], encoder.encode_passages, encoder.info)
    assert m["n_docs"] == 11
    assert sorted(p.name for p in path.iterdir()) == ["CURRENT", "gen-000002"]


def test_cli_build_add_info(tmp_path, base_model_path):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps(d, ensure_ascii=False)
            for d in [
                {"id": "a", "text": "Berlin ist die Hauptstadt Deutschlands.", "lang": "de", "group": "g"},
                {"id": "b", "text": "Berlin is the capital of Germany.", "group": "g"},
                {"id": "c", "text": "东京是日本的首都。", "lang": "zh"},
            ]
        )
    )
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "d", "text": "Paris is the capital of France."}) + "\n")
    env = {**os.environ, "SAMELANG_MODEL": str(base_model_path)}
    cli = [sys.executable, "-m", "samelang"]
    out = tmp_path / "idx"
    r = subprocess.run(cli + ["index", "build", "--corpus", "jsonl", "--input", str(corpus), "--out", str(out)],
                       env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["counts"] == {"de": 1, "en": 1, "zh": 1}
    assert "embedding documents" in r.stderr  # the progress bar
    r = subprocess.run(cli + ["index", "add", str(out), "--input", str(more)], env=env, capture_output=True,
                       text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = subprocess.run(cli + ["index", "info", str(out)], env=env, capture_output=True, text=True, timeout=60)
    info = json.loads(r.stdout)
    assert info["n_docs"] == 4 and info["generation"] == 2 and info["counts_per_lang"]["en"] == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    r = subprocess.run(cli + ["index", "build", "--corpus", "jsonl", "--input", str(bad), "--out", str(tmp_path / "b")],
                       env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode != 0 and "bad.jsonl:1: field 'text'" in r.stderr


def test_gpu_path_is_selected_only_when_gpus_exist(tmp_path, encoder, docs):
    import faiss

    from samelang.indexes.vectors import to_gpu_if_available

    build_index(tmp_path / "i", docs[:5], encoder.encode_passages, encoder.info)
    idx = open_index(tmp_path / "i", encoder.info, use_gpu=True)
    gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    assert idx.on_gpu is (gpus > 0)
    same, on_gpu = to_gpu_if_available(idx.faiss_index, use_gpu=False)
    assert same is idx.faiss_index and on_gpu is False
    idx.close()


def _jsonl(path: Path, docs) -> Path:
    path.write_text("".join(json.dumps({"id": d.id, "text": d.text, "lang": d.lang}) + "\n" for d in docs))
    return path


def test_two_concurrent_index_add_processes_keep_both_sets(tmp_path, encoder, docs, samelang_home):
    """Two real `samelang index add` runs at once on one index: the writer lock makes them take
    turns; both exit 0 and every document of both is there afterwards."""
    out = tmp_path / "idx"
    build_index(out, docs[:10], encoder.encode_passages, encoder.info)
    a = _jsonl(tmp_path / "a.jsonl", docs[10:20])
    b = _jsonl(tmp_path / "b.jsonl", docs[30:40])
    env = {**os.environ, "SAMELANG_HOME": str(samelang_home)}
    cmd = [sys.executable, "-m", "samelang", "index", "add", str(out), "--model", str(encoder.path), "--input"]
    procs = [subprocess.Popen([*cmd, str(f)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for f in (a, b)]  # fmt: skip
    results = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    gens = sorted(json.loads(o.strip().splitlines()[-1])["generation"] for o, _ in results)
    assert gens == [2, 3]  # one after the other, never both on generation 1
    idx = open_index(out, encoder.info)
    ids = set(idx.docs.rows_for_ids([d.id for d in docs[:40]]))
    assert ids == {d.id for d in docs[:20]} | {d.id for d in docs[30:40]} and idx.size == 30
    idx.close()


def test_writer_lock_and_readers(tmp_path, encoder, docs):
    from samelang.indexes.generations import IndexBusy, writer_lock

    out = tmp_path / "idx"
    build_index(out, docs[:5], encoder.encode_passages, encoder.info)
    with writer_lock(out):  # another writer holds the index: one that will not wait is told so
        with pytest.raises(IndexBusy, match="another process is writing"):
            add_documents(out, docs[5:6], encoder.encode_passages, encoder.info, wait=False)
    reader = open_index(out, encoder.info)  # a server on generation 1
    add_documents(out, docs[5:6], encoder.encode_passages, encoder.info)
    assert (out / "gen-000001").exists()  # still read: kept
    assert len(reader.docs.get_rows([0, 1, 2])) == 3
    reader.close()
    add_documents(out, docs[6:7], encoder.encode_passages, encoder.info)
    assert sorted(p.name for p in out.glob("gen-*")) == ["gen-000003"]  # unread generations are removed
    assert open_index(out, encoder.info).size == 7


def test_the_search_thread_count_holds_in_the_thread_that_searches(tmp_path, encoder, docs, monkeypatch):
    """OpenMP keeps its thread count per thread: a server that sets it once at start-up must see it in
    the request's worker thread, where ``OpenIndex.search`` runs, not only in the thread that set it."""
    import threading

    import faiss

    from samelang.indexes import vectors as V

    build_index(tmp_path / "idx", docs, encoder.encode_passages, encoder.info)
    idx = open_index(tmp_path / "idx", encoder.info)
    q = encoder.encode_queries(["Berlin"])
    seen = {}
    calls = []
    real = faiss.omp_set_num_threads
    monkeypatch.setattr(faiss, "omp_set_num_threads", lambda n: (calls.append(n), real(n))[1])
    before = faiss.omp_get_max_threads()
    try:
        V.set_search_threads(1)

        def request():
            calls.clear()
            idx.search(q, 3)
            seen["threads"] = faiss.omp_get_max_threads()

        worker = threading.Thread(target=request)
        worker.start()
        worker.join()
    finally:
        V.set_search_threads(None)
        real(before)
        idx.close()
    assert calls == [1] and seen["threads"] == 1  # set again in the worker, before its search
