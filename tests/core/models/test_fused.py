"""The fused retriever (``models/e5-small-fused``): the real base and aligned models as one encoder,
its score computed apart from the pipeline over a real FAISS index, and translations found without
``group`` labels (the reader's version first, the others listed as its versions)."""

from __future__ import annotations

import numpy as np
import pytest

from samelang.corpora import load_xquad
from samelang.corpora.records import Document
from samelang.indexes.index import open_index
from samelang.indexes.writes import build_index
from samelang.primitives.langid import get_identifier

ARTICLES = (2, 5)  # two held-out test articles


@pytest.fixture(scope="module")
def fused(samelang_home, base_model_path):
    from samelang.core.catalogue import REPO_MODELS, open_encoder

    return open_encoder(REPO_MODELS / "e5-small-fused", home=samelang_home)


@pytest.fixture(scope="module")
def unlabelled(tmp_path_factory, fused):
    """en and zh versions of two test articles' paragraphs, as a user has them: no group labels."""
    docs = [Document(p.id, p.text, p.lang, None) for p in load_xquad(["en", "zh"], split="test").paragraphs
            if p.article in ARTICLES]  # fmt: skip
    out = tmp_path_factory.mktemp("fused") / "idx"
    build_index(out, docs, fused.encode_passages, fused.info, source="test", analyzer=fused.analyzer)
    return open_index(out, fused.info)


def _pipeline(fused, index, **defaults):
    from samelang.core.models.cross_encoder import CosineReranker
    from samelang.core.models.generation import NoGenerator
    from samelang.retrieval.limits import Limits
    from samelang.retrieval.options import Defaults
    from samelang.retrieval.pipeline import Pipeline

    return Pipeline(fused, index, CosineReranker(fused), NoGenerator(), get_identifier(), Limits(),
                    defaults=Defaults(**defaults))  # fmt: skip


def pipe_opts(**kw):
    from samelang.retrieval.options import SearchOptions

    return SearchOptions(**kw)


def test_vectors_hold_both_models_and_the_index_knows_the_pair(fused):
    v = fused.encode_passages(["Der Rhein fließt durch Basel.", "莱茵河流经巴塞尔。"])
    same, cross = fused.halves(v)
    assert v.shape[1] == fused.same.dim + fused.cross.dim
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(same, fused.same.encode_passages(["Der Rhein fließt durch Basel.", "莱茵河流经巴塞尔。"])
                               / np.linalg.norm(same, axis=1, keepdims=True), atol=1e-5)  # fmt: skip
    assert fused.fingerprint not in (fused.same.fingerprint, fused.cross.fingerprint)
    assert fused.info.dim == fused.dim and fused.analyzer[0] == fused.same.analyzer[0]


@pytest.mark.parametrize("beta", [None, 0.5])
def test_the_fused_score_is_the_documented_formula(fused, unlabelled, beta):
    """Every document is a candidate here (fewer than ``candidate_depth``): the pipeline's order is
    the formula's, computed from each model's own embeddings (``beta``: the folder's
    ``same_cross_weight``, or another one)."""
    from dataclasses import replace

    pipe = _pipeline(fused, unlabelled, group_candidates=False, lexical_weight=0.04)
    if beta is not None:
        pipe.candidates.retriever.fusion = replace(fused.fusion, same_cross_weight=beta)
    beta = pipe.candidates.retriever.fusion.same_cross_weight
    docs = unlabelled.docs.get_rows(list(range(unlabelled.size)))
    assert unlabelled.size < fused.fusion.candidate_depth
    q = next(q for q in load_xquad(["zh"], split="test").questions if q.article == ARTICLES[0])
    ranked = pipe.search(q.text, pipe_opts(k=10))
    assert ranked.query_lang == "zh"

    def cosines(model, reference):
        p, qv = model.encode_passages([d.text for d in docs]), model.encode_queries([q.text])[0]
        qv = qv / np.linalg.norm(qv)
        ref = reference @ qv  # the query's cosines with the reference passages (calibration.npz)
        return (p / np.linalg.norm(p, axis=1, keepdims=True)) @ qv, ref.mean(), ref.std()

    (cs, mu_s, sd_s), (cc, mu_c, sd_c) = (cosines(m, r) for m, r in zip((fused.same, fused.cross), fused.calibration))
    assert len(fused.calibration[0]) == 960
    lex, analyze = pipe.lexical
    bm = lex.scores(analyze(q.text)).astype(np.float64)
    same = cs + 0.04 * bm / bm.max()
    z_same = (same - mu_s) / sd_s + beta * (cc - mu_c) / sd_c
    z_cross = (cc - mu_c) / sd_c + fused.fusion.cross_offset
    score = np.where(np.array([d.lang for d in docs]) == "zh", z_same, z_cross)
    want = [docs[i].id for i in np.argsort(-score, kind="stable")[:10]]
    assert [h.doc.id for h in ranked.hits] == want
    np.testing.assert_allclose([h.score for h in ranked.hits], np.sort(score)[::-1][:10], rtol=1e-4, atol=1e-4)


def test_translations_are_found_without_labels_and_the_readers_version_comes_first(fused, unlabelled):
    pipe = _pipeline(fused, unlabelled, group_candidates=True, lexical_weight=0.04)
    qs = [q for q in load_xquad(["zh"], split="test").questions if q.article in ARTICLES][::6]
    first_zh, listed = 0, 0
    for q in qs:
        hits = pipe.search(q.text, pipe_opts(k=5)).hits
        top = hits[0]
        first_zh += top.doc.lang == "zh" and top.doc.id == f"xquad-zh-{q.group[6:]}"
        listed += [v.id for v in top.versions] == [f"xquad-en-{q.group[6:]}"]
        assert len({h.doc.id for h in hits}) == len(hits)
        assert all(v.lang != h.doc.lang for h in hits for v in h.versions)  # one version per language
    assert len(qs) == 6 and first_zh >= 5 and listed >= 4, (first_zh, listed)  # measured: 6 and 5
    # an English reader of the same questions gets the English versions first
    en = [q for q in load_xquad(["en"], split="test").questions if q.article in ARTICLES][::6]
    assert sum(pipe.search(q.text, pipe_opts(k=1)).hits[0].doc.lang == "en" for q in en) >= 5


def test_a_language_filter_ranks_within_that_language(fused, unlabelled):
    pipe = _pipeline(fused, unlabelled, group_candidates=True, lexical_weight=0.04)
    q = next(q for q in load_xquad(["zh"], split="test").questions if q.article == ARTICLES[1])
    hits = pipe.search(q.text, pipe_opts(k=5, langs=("en",))).hits
    assert len(hits) == 5 and all(h.doc.lang == "en" and not h.versions for h in hits)


def test_one_model_in_both_roles_is_loaded_and_run_once(tmp_path, samelang_home, base_model_path):
    """A fused retriever whose two parts name the same model (an encoder that puts relevance before
    language, with the fusion's BM25, language offset and translation inference): one encoder fills both
    halves, each text encoded once, and the vectors are those of two identical halves."""
    from samelang.core.catalogue import open_encoder
    from samelang.core.models.fused import FusionConfig

    FusionConfig(same="base", cross="base").write(tmp_path / "one")
    one = open_encoder(tmp_path / "one", home=samelang_home)
    assert one.one_model and one.same is one.cross and one.dim == 2 * one.same.dim
    calls = []
    real = one.same.encode_passages
    one.same.encode_passages = lambda texts, progress=False: calls.append(len(texts)) or real(texts, progress)
    v = one.encode_passages(["Der Rhein fließt durch Basel.", "莱茵河流经巴塞尔。"])
    assert calls == [2]
    same, cross = one.halves(v)
    np.testing.assert_allclose(same, cross, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
