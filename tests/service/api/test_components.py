"""Start-up: the real loading path with a cross-encoder checkpoint, and the refusal of
an index built by another model.

The cross-encoder here is a tiny random-weight XLM-R sequence classifier with a one-logit head
(:mod:`tests.tiny_models`, the shape of bge-reranker-v2-m3): this test is about plumbing (loading,
naming, ordering), not about ranking quality."""

from __future__ import annotations

import shutil

import httpx
import pytest

from samelang.indexes.generations import IndexModelMismatch
from tests.service.conftest import running


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory, tiny_models):
    out = tmp_path_factory.mktemp("ce") / "tiny-ce-untrained"
    shutil.copytree(tiny_models["xlmr-seqcls"], out)
    return out


def test_rerank_uses_the_configured_cross_encoder(service_settings, cross_encoder_dir):
    from samelang.service.api.app import create_app

    cfg = service_settings.model_copy(update={"reranker": cross_encoder_dir})
    with running(create_app(cfg)) as url, httpx.Client(base_url=url, timeout=120) as c:  # lifespan loads everything
        info = c.get("/info").json()
        assert (info["reranker"]["name"], info["reranker"]["kind"]) == ("tiny-ce-untrained", "cross-encoder")
        # a checkpoint without an inference card runs at the fp32 reference numerics; the base encoder at
        # what its shipped record chose for this class of CPU (int8 on AMX), else fp32
        from samelang.core.model_folder import recorded_precision
        from samelang.core.runtime.precision import precision_device

        base = recorded_precision(service_settings.model, precision_device("cpu")) or "fp32"
        assert info["reranker"]["precision"] == "fp32" and info["encoder"]["precision"] == base
        docs = ["Berlin is the capital of Germany.", "柏林是德国的首都。", "Bananas are yellow.", "Der Rhein fließt."]
        body = c.post("/rerank", json={"query": "What is the capital of Germany?", "documents": docs}).json()
        assert body["reranker"] == "tiny-ce-untrained"
        scores = [r["score"] for r in body["results"]]
        assert sorted(r["index"] for r in body["results"]) == [0, 1, 2, 3]
        assert scores == sorted(scores, reverse=True) and len(set(scores)) == 4


def test_an_index_built_by_another_model_is_refused(service_settings, cross_encoder_dir):
    from samelang.service.components import load_components

    cfg = service_settings.model_copy(update={"model": cross_encoder_dir})
    with pytest.raises(IndexModelMismatch) as e:
        load_components(cfg)
    msg = str(e.value)
    assert "multilingual-e5-small" in msg and "tiny-ce-untrained" in msg and "samelang index build" in msg


def test_reranker_choice(tmp_path):
    from samelang.core.catalogue import REPO_MODELS, default_reranker, served_defaults

    assert default_reranker("cosine") is None and default_reranker("Cosine") is None
    assert default_reranker(str(tmp_path)) == tmp_path and default_reranker(tmp_path) == tmp_path
    # unset: the measured defaults' cross-encoder (models/serving.json), or the cosine when it reranks by none
    measured = served_defaults().reranker
    want = None if measured in ("none", "cosine") else REPO_MODELS / measured
    assert default_reranker(None) == want


def test_the_served_lamar_reranker_serves_rerank(service_settings, served_cross_encoder):
    """``--reranker models/<serving.json's cross-encoder>`` (a LAMAR one): among a document and its
    translation the reader's language comes first, both above an unrelated one; giving it turns
    reranking on for /search. ``--reranker cosine`` selects the bi-encoder fallback."""
    from samelang.core.model_folder import recorded_precision
    from samelang.core.runtime.precision import precision_device
    from samelang.service.api.app import create_app

    query = "维多利亚和阿尔伯特博物馆在哪里？"  # zh: where is the V&A museum?
    docs = ["The V&A museum is in London.", "维多利亚和阿尔伯特博物馆位于伦敦。", "Paris est en France."]
    cfg = service_settings.model_copy(update={"reranker": str(served_cross_encoder)})
    with running(create_app(cfg)) as url, httpx.Client(base_url=url, timeout=120) as c:
        info = c.get("/info").json()["reranker"]
        assert (info["name"], info["kind"]) == (served_cross_encoder.name, "cross-encoder")
        # precision auto: what the model's inference card chose (samelang eval precision)
        assert info["precision"] == (recorded_precision(served_cross_encoder, precision_device("cpu")) or "fp32")
        body = c.post("/rerank", json={"query": query, "documents": docs}).json()
        assert body["reranker"] == served_cross_encoder.name
        assert [r["index"] for r in body["results"]] == [1, 0, 2]
        assert [r["lang"] for r in body["results"]][:2] == ["zh", "en"]
        found = c.post("/search", json={"query": query, "k": 3}).json()
        assert found["components"]["reranker"] == served_cross_encoder.name
        scores = [h["score"] for h in found["hits"]]
        assert scores == sorted(scores, reverse=True) and all(0 < x < 1 for x in scores)  # sigmoid scores
    cfg = service_settings.model_copy(update={"reranker": "cosine"})
    with running(create_app(cfg)) as url, httpx.Client(base_url=url, timeout=120) as c:
        assert c.get("/info").json()["reranker"] == {"name": "bi-encoder-cosine", "kind": "bi-encoder-cosine"}


def test_prepare_served_models_leaves_each_graph_in_the_cache(service_settings, tiny_models, tiny_reader, tmp_path):
    """``samelang models prepare --served``: each served model loaded once, at the numerics it is served with
    (fp32 here), so that a server started later finds its graphs exported; a second run exports nothing."""
    from samelang.service.components import prepare_served_models

    cfg = service_settings.model_copy(update={
        "home": tmp_path, "model": str(tiny_models["xlmr-mean"]), "reranker": str(tiny_models["xlmr-seqcls"]),
        "reader": str(tiny_reader), "precision": "fp32", "backend": "onnx"})  # fmt: skip
    assert (cfg.engine_options().precision, cfg.engine_options().backend) == ("fp32", "onnx")
    said = []
    roles = prepare_served_models(cfg, log=said.append)
    assert roles == {"bi-encoder": str(tiny_models["xlmr-mean"]), "reranker": str(tiny_models["xlmr-seqcls"]),
                     "reader": str(tiny_reader)}  # fmt: skip
    exports = sorted(p.parent.name.split("-")[1] for p in (tmp_path / "cache" / "onnx").glob("*/export.json"))
    assert exports == ["embed", "score", "span"] and "served models ready" in said[0]
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "cache" / "onnx").glob("*/model.onnx")}
    prepare_served_models(cfg, log=said.append)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "cache" / "onnx").glob("*/model.onnx")} == stamps
