"""SmoothQuant's rewrite (samelang/core/runtime/quantise.py) on the real exported base model: it changes
no output in real numbers, it moves the activations' outlier channels into the weights, and its
calibration texts come from the train articles only."""

from __future__ import annotations

import numpy as np

from samelang.core.runtime import quantise
from samelang.corpora import load_xquad


def _fp32_graph(base_model_path, samelang_home):
    from samelang.core.models.encoder import Encoder
    from samelang.core.runtime.precision import EngineOptions

    enc = Encoder(base_model_path, home=samelang_home, options=EngineOptions(precision="fp32", backend="onnx"))
    return enc, enc.engine.backend.path


def test_smoothing_keeps_the_fp32_outputs_and_shrinks_activation_outliers(base_model_path, samelang_home, tmp_path):
    import onnx
    import onnxruntime as ort

    enc, fp32 = _fp32_graph(base_model_path, samelang_home)
    meta = enc.engine.meta
    texts = quantise.calibration_texts("embed", meta, per_lang=1)
    feeds = quantise.calibration_feeds(enc.engine.tokenizer, texts, 128, int(meta["pad_id"]))
    smoothed = quantise.smooth(fp32, tmp_path / "smoothed.onnx", feeds)
    ref = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
    new = ort.InferenceSession(str(smoothed), providers=["CPUExecutionProvider"])
    for feed in feeds:
        a, b = ref.run(None, feed)[0], new.run(None, feed)[0]
        assert np.abs(a - b).max() < 1e-3  # the same function: X W = (X / s)(s W)
    graph = onnx.load(str(smoothed), load_external_data=False).graph
    muls = [n for n in graph.node if n.op_type == "Mul" and n.input[1].endswith("_smooth_inv")]
    products = [n for n in graph.node if n.op_type in quantise.SMOOTHED_OPS]
    assert len(muls) == len(products) == 12 * 4  # per layer: QKV (Attention), attention output, FFN up, FFN down
    # calibration tokenised on a copy: the engine's tokenizer still truncates and does not pad
    assert enc.engine.tokenizer.padding is None and enc.engine.tokenizer.truncation["max_length"] == 512


def test_calibration_texts_are_fixed_and_from_train_articles():
    meta = {"query_prompt": "query: ", "passage_prompt": "passage: "}
    texts = quantise.calibration_texts("embed", meta, per_lang=2)
    assert texts == quantise.calibration_texts("embed", meta, per_lang=2)  # seeded: the same graph every export
    assert len(texts) == 12 * 4 and all(t.startswith(("query: ", "passage: ")) for t in texts)
    test = load_xquad(split="test")
    test_texts = {p.text for p in test.paragraphs} | {q.text for q in test.questions}
    assert not {t.split(": ", 1)[1] for t in texts} & test_texts
    pairs = quantise.calibration_texts("score", meta, per_lang=2)
    assert len(pairs) == 24 and all(isinstance(p, tuple) and p[1] not in test_texts for p in pairs)


def test_an_int8_export_is_smoothed_quantised_and_close_to_fp32_on_tiny_models(tiny_models, tmp_path):
    """The whole int8 path (export, calibration, SmoothQuant, dynamic quantisation, the engine running
    it) on tiny stand-ins, an embedder and a cross-encoder. The real models' recorded tolerances are
    the slow checks in test_engine.py (each int8 export of e5-small calibrates for a minute or more)."""
    import onnx

    from samelang.core.models.cross_encoder import CrossEncoderReranker
    from samelang.core.models.encoder import Encoder
    from samelang.core.runtime.precision import EngineOptions

    texts = ["Where does the Rhine begin?", "莱茵河发源于瑞士的阿尔卑斯山。", "Река начинается в Альпах. " * 5]
    fp32, int8 = EngineOptions(precision="fp32", backend="torch"), EngineOptions(precision="int8", backend="onnx")
    enc = Encoder(tiny_models["xlmr-mean"], home=tmp_path, options=int8)
    assert (enc.engine.precision, enc.engine.backend_name) == ("int8", "onnx")
    ref = Encoder(tiny_models["xlmr-mean"], home=tmp_path, options=fp32).encode_passages(texts)
    cos = (enc.encode_passages(texts) * ref).sum(axis=1)
    assert cos.min() > 0.98, cos
    ops = {n.op_type for n in onnx.load(str(enc.engine.backend.path), load_external_data=False).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops, ops  # quantised: int8 products
    pairs = [(texts[0], t) for t in texts]
    rr = CrossEncoderReranker(tiny_models["xlmr-seqcls"], home=tmp_path, options=int8)
    want = CrossEncoderReranker(tiny_models["xlmr-seqcls"], home=tmp_path, options=fp32).score_pairs(pairs)
    assert np.abs(rr.score_pairs(pairs) - want).max() < 0.05
