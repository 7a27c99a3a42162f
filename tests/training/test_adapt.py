"""``samelang adapt`` end to end at tiny size, on the real base model and a real FAISS index of unlabelled
English and German paragraphs: it mines, trains, measures, decides, and the index changes only as the
decision says (the kill-and-resume test: tests/service/test_adapt_reload.py)."""

from __future__ import annotations

import json

import numpy as np

from samelang.indexes.generations import read_index_manifest
from samelang.training.adapt import Adaptation, AdaptOptions


def test_adapt_mines_trains_measures_and_changes_the_index_only_if_it_serves(small_index, base_model_path,
                                                                              samelang_home, tmp_path):  # fmt: skip
    opts = AdaptOptions(index=small_index, model=str(base_model_path), out=tmp_path / "adapted", max_steps=2,
                        batch_size=4, max_length=64, general=False, guard="tiny", dev_share=0.25,
                        home=samelang_home)  # fmt: skip
    said = []
    report = Adaptation(opts, log=said.append).run()
    assert report["documents"] == 24 and report["translation_links"] >= 6  # XQuAD's versions are found unlabelled
    assert report["training_groups"] > 0 and report["dev"]["before"]["queries"] > 0
    assert set(report["guard"]["before"]) == {"parallel", "partial", "one", "mono"}
    history = json.loads((opts.output() / "work" / "encoder" / "history.json").read_text())
    assert len(history) == 2 and all(h["nce_data"] > 0 and h["jsd_data"] > 0 for h in history)
    manifest = read_index_manifest(small_index)
    if report["verdict"]["serve"]:
        assert manifest["generation"] == 2 and manifest["reembedded"]["model"] == report["adapted"]
    else:
        assert manifest["generation"] == 1 and "reembedded" not in manifest
    card = (opts.output() / "README.md").read_text()
    assert report["verdict"]["why"] in card and "held-out cross-language queries" in card
    # a second run mines nothing and trains nothing again
    said.clear()
    Adaptation(opts.model_copy(update={"apply": False}), log=said.append).run()
    assert any("kept from an earlier run" in s for s in said) and any("trained by an earlier run" in s for s in said)


def test_adapt_fits_any_bi_encoder_serve_accepts(tiny_models, samelang_home, tmp_path):
    """A bge-m3-shaped model (XLM-R, CLS pooling; tiny, random weights): adapted with a new LoRA over it,
    and the index it built measured with the adapted model."""
    from samelang.core.models.encoder import Encoder
    from samelang.indexes.writes import build_index
    from tests.conftest import _unlabelled

    model = tiny_models["xlmr-cls"]
    enc = Encoder(model, home=samelang_home)
    index = tmp_path / "idx"
    build_index(index, _unlabelled(12), enc.encode_passages, enc.info, analyzer=enc.analyzer)
    opts = AdaptOptions(index=index, model=str(model), out=tmp_path / "a", max_steps=2, batch_size=4, max_length=48,
                        general=False, guard="off", dev_share=0.25, apply=False, home=samelang_home)  # fmt: skip
    report = Adaptation(opts, log=lambda *a: None).run()
    record = json.loads((tmp_path / "a" / "work" / "encoder" / "samelang_manifest.json").read_text())
    assert record["kind"] == "lora-adapter" and report["adapted"] == str(tmp_path / "a" / "work" / "encoder")
    assert report["dev"]["after"]["queries"] == report["dev"]["before"]["queries"]
    assert read_index_manifest(index)["generation"] == 1  # --no-apply: measured, nothing changed


def test_a_fused_retrievers_untrained_half_is_kept_not_embedded_again(
    tmp_path, samelang_home, base_model_path, monkeypatch
):
    """Adapting a fused retriever trains its cross-language half only: the collection's new vectors keep the
    stored reader's-language half (never embedded again) beside the new cross half, equal to embedding both."""
    from samelang.core.catalogue import REPO_MODELS, open_encoder, served_defaults
    from samelang.core.models.fused import FusionConfig
    from samelang.corpora import Document, load_xquad
    from samelang.indexes.index import open_index
    from samelang.indexes.writes import build_index
    from samelang.training import adapt_data as D
    from samelang.training.adapt import embed_after

    # the served fused pair, and as another cross half the base model under another name (one checkpoint,
    # two encoders): every graph is one that other tests export anyway
    served = open_encoder(REPO_MODELS / served_defaults().retriever, home=samelang_home)
    (tmp_path / "other-cross").symlink_to(base_model_path, target_is_directory=True)
    FusionConfig(same="base", cross=str(tmp_path / "other-cross")).write(tmp_path / "adapted")
    adapted = open_encoder(tmp_path / "adapted", home=samelang_home)
    docs = [Document(p.id, p.text, p.lang, None) for p in load_xquad(["en", "zh"], split="test").paragraphs[:3]]
    build_index(tmp_path / "idx", docs, served.encode_passages, served.info, source="test", analyzer=served.analyzer)
    want = adapted.encode_passages([d.text for d in docs])

    def never(*_a, **_k):
        raise AssertionError("the reader's-language half was embedded again")

    monkeypatch.setattr(adapted.same, "encode_passages", never)
    index = open_index(tmp_path / "idx", served.info)
    try:
        got = embed_after(served, adapted, index, D.read_documents(index))
    finally:
        index.close()
    np.testing.assert_allclose(got, want, atol=1e-5)
