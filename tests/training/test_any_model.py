"""The papers' own architectures, end to end (issue: bring the papers' own models): tiny random
stand-ins built from configs (``tests/tiny_models.py``: XLM-R mean and CLS, BERT with jina-style
prompt names, XLM-R sequence classification, Qwen3 and Gemma 3 causal LMs), each as it comes, then
trained with LoRA and in full by the recipe of its role (a bi-encoder with ``L_JSD + L_NCE``, a
reranker through both LAMAR stages), then indexed and served by a real server: ``/search``,
``/v1/embeddings`` and ``/rerank`` answer 200, and the served scores are the trained module's."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
import torch

from samelang.core.models.encoder import Encoder
from samelang.core.runtime.precision import EngineOptions
from samelang.corpora import load_xquad
from samelang.indexes.writes import build_index
from samelang.training.biencoder import BiencoderArgs, train_biencoder
from samelang.training.lamar import RerankerArgs, RerankerModule, train_reranker
from tests.service.conftest import running

EMBED, SCORE = ("xlmr-mean", "xlmr-cls", "bert"), ("xlmr-seqcls", "qwen3-causal", "gemma3-causal")
QUERY = "Wie viele Punkte gab die Verteidigung der Panthers ab?"
DOCS = ["The Panthers defense gave up just 308 points.", "黑豹队的防守只丢了308分。", "Paris is in France."]


def quiet(*_):
    pass


def trained_biencoder(base, out, full: bool, home):
    args = BiencoderArgs(out=out, base=str(base), langs="zh", per_lang=4, batch_size=2, max_steps=2, max_length=48,
                         dev_n_articles=0, device="cpu", full=full, home=home)  # fmt: skip
    return train_biencoder(args, log=quiet)


def trained_reranker(base, root, full: bool, home):
    common = dict(langs="en,zh", batch_size=2, max_steps=2, max_length=48, dev_questions=0, device="cpu", full=full,
                  home=home)  # fmt: skip
    train_reranker(RerankerArgs(out=root / "stage1", stage=1, n_sampled=1, init=str(base), **common), log=quiet)
    s2 = RerankerArgs(out=root / "stage2", stage=2, init=str(root / "stage1"), lr=1e-2, teacher="unused", **common)
    return train_reranker(s2, log=quiet)


def small_index(encoder_folder, out, home):
    enc = Encoder(encoder_folder, home=home, options=EngineOptions(precision="fp32"))
    docs = load_xquad(["en", "zh"], split="test").documents()[:40]
    build_index(out, docs, enc.encode_passages, enc.info, source="xquad:en,zh:test[:40]", analyzer=enc.analyzer)
    return out


def serve(home, model, index, reranker):
    from samelang.service.api.app import create_app
    from samelang.service.components import load_components
    from samelang.service.config import ServiceSettings

    cfg = ServiceSettings(home=home, model=model, index=index, reranker=str(reranker), generator="none",
                          micro_batching=False, index_reload_s=0)  # fmt: skip
    components = load_components(cfg)
    return create_app(cfg, components), components


def ask_everything(url: str, model: str) -> dict:
    with httpx.Client(base_url=url, timeout=120) as c:
        search = c.post("/search", json={"query": QUERY, "k": 3})
        emb = c.post("/v1/embeddings", json={"model": model, "input": DOCS})
        rerank = c.post("/rerank", json={"query": QUERY, "documents": DOCS})
        info = c.get("/info")
    for r in (search, emb, rerank, info):
        assert r.status_code == 200, r.text
    return {"search": search.json(), "emb": emb.json(), "rerank": rerank.json(), "info": info.json()}


@pytest.mark.parametrize("how", ["as-is", "lora", "full"])
@pytest.mark.parametrize("kind", EMBED)
def test_a_biencoder_of_any_architecture_trains_indexes_and_serves(tiny_models, tmp_path, samelang_home, kind, how):
    folder = tiny_models[kind]
    if how != "as-is":
        folder = trained_biencoder(folder, tmp_path / "trained", how == "full", samelang_home)
        files = {p.name for p in folder.iterdir()}
        assert {"modules.json", "config_sentence_transformers.json", "1_Pooling"} <= files  # a complete ST config
    index = small_index(folder, tmp_path / "index", samelang_home)
    app, components = serve(samelang_home, folder, index, "cosine")
    with running(app) as url:
        out = ask_everything(url, folder.name)
    components.pipeline.index.close()
    assert len(out["search"]["hits"]) == 3 and len(out["emb"]["data"][0]["embedding"]) == 32
    want = {"xlmr-cls": "cls"}.get(kind, "mean")
    assert out["info"]["encoder"]["name"] == folder.name and components.pipeline.encoder.engine.meta["pooling"] == want
    # measured defaults belong to e5-small: this model is served with neutral ones, and /info says so
    assert out["info"]["defaults"]["not_measured_on"] == {"model": str(folder)}


@pytest.mark.parametrize("how", ["as-is", "lora", "full"])
@pytest.mark.parametrize("kind", SCORE)
def test_a_reranker_of_any_architecture_trains_both_stages_and_serves(
    tiny_models, tmp_path, samelang_home, kind, how
):  # fmt: skip
    folder = tiny_models[kind]
    if how != "as-is":
        folder = trained_reranker(folder, tmp_path / "lamar", how == "full", samelang_home)
        manifest = json.loads((folder / "samelang_manifest.json").read_text())
        # the real base, not e5-small: a LoRA stage 2 merges onto the architecture's own base, a full one
        # continues from stage 1's weights
        started = tiny_models[kind] if how == "lora" else folder.parent / "stage1"
        assert manifest["base"] == str(started.resolve())
    index = small_index(tiny_models["xlmr-mean"], tmp_path / "index", samelang_home)
    app, components = serve(samelang_home, tiny_models["xlmr-mean"], index, folder)
    with running(app) as url:
        out = ask_everything(url, "xlmr-mean")
    components.pipeline.index.close()
    served = {x["index"]: x["score"] for x in out["rerank"]["results"]}
    assert len(served) == 3
    if how != "as-is":  # the served scores are the trained module's
        module = RerankerModule(RerankerArgs(out=folder, stage=2, init=str(folder), max_length=256), samelang_home)
        with torch.no_grad():
            want = torch.sigmoid(module.eval()([QUERY] * 3, DOCS)).numpy()
        np.testing.assert_allclose([served[i] for i in range(3)], want, atol=2e-4)


@pytest.mark.slow
def test_the_shipped_gemma_trains_as_a_yes_no_reranker_and_serves(tiny_models, tmp_path, samelang_home):
    """The real Gemma 3 270M (the generator's weights as a Hugging Face folder) through a few steps of
    both LAMAR stages with LoRA, then ``/rerank``; scripts/experiments/gemma_reranker.py measures it."""
    from samelang.core.models.gemma_checkpoint import prepare_generator_hf

    base = prepare_generator_hf(samelang_home)
    folder = trained_reranker(base, tmp_path / "lamar", False, samelang_home)
    index = small_index(tiny_models["xlmr-mean"], tmp_path / "index", samelang_home)
    app, components = serve(samelang_home, tiny_models["xlmr-mean"], index, folder)
    assert components.pipeline.reranker.engine.meta["score"] == "yes-no"
    with running(app) as url:
        out = ask_everything(url, "xlmr-mean")
    components.pipeline.index.close()
    assert sorted(x["index"] for x in out["rerank"]["results"]) == [0, 1, 2]
