"""int8 that keeps quality: SmoothQuant, calibrated on train articles, then dynamic quantisation.

Why: ONNX Runtime's dynamic quantisation gives an activation one int8 scale per tensor, most of which a BERT layer's
few outlier channels take. SmoothQuant (Xiao et al., ICML 2023) moves them into the weights, quantised per channel:
for each ``Y = X W`` (every MatMul and the fused Attention's packed QKV projection), per input channel ``j``::

    s_j = max|X_j| ** alpha / max_k |W_jk| ** (1 - alpha)
    Y   = (X diag(s)^-1) (diag(s) W)

the same ``Y`` in real numbers. ``max|X_j|`` comes from fixed XQuAD TRAIN-article texts (:func:`calibration_texts`);
``X diag(s)^-1`` is one ``Mul`` on the edge into that product only (``X`` also feeds the residual stream, so the
LayerNorm ahead of it cannot take the scale). Then every MatMul/Attention is quantised dynamically; alpha = 0.8.
"""

from __future__ import annotations

import logging
import random
import tempfile
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from samelang.corpora import load_xquad

ALPHA = 0.8
# part of the int8 graph's cache key (and of the embedding caches and demo index built with it): a changed
# recipe is exported again. sq2: the same SmoothQuant, after which the export unfuses the residual layer
# norms (engine.ONNX_FORMAT 3); the activations' int8 rounding then differs a little (cosine 0.99984 with sq1)
RECIPE = "sq2"
SMOOTHED_OPS = ("MatMul", "Attention")


def calibration_texts(kind: str, meta: dict, per_lang: int = 16, seed: int = 6) -> list:
    """Fixed inputs from XQuAD's TRAIN articles, 12 languages: for a bi-encoder (``embed``)
    ``per_lang`` paragraphs and questions each, with the model's prompts; for a cross-encoder
    (``score``) or a reader (``span``) ``per_lang`` (question, its paragraph) pairs."""

    data = load_xquad(split="train")
    para = {(p.group, p.lang): p.text for p in data.paragraphs}
    rng = random.Random(seed)
    out: list = []
    for lang in sorted({p.lang for p in data.paragraphs}):
        questions = rng.sample([q for q in data.questions if q.lang == lang], per_lang)
        if kind in ("score", "span"):  # a reader reads (question, paragraph) pairs too
            out += [(q.text, para[(q.group, q.lang)]) for q in questions]
        else:
            paragraphs = rng.sample([p.text for p in data.paragraphs if p.lang == lang], per_lang)
            out += [meta.get("passage_prompt", "") + t for t in paragraphs]
            out += [meta.get("query_prompt", "") + q.text for q in questions]
    return out


def calibration_feeds(tokenizer, inputs: list, max_length: int, pad_id: int, batch: int = 16) -> list[dict]:
    """``inputs`` tokenised as the engine does (``tokenizers`` backend, truncated), in padded batches;
    on a copy of ``tokenizer``, whose own truncation and padding are left as they were."""

    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.enable_truncation(max_length)
    tok.enable_padding(pad_id=pad_id)
    feeds = []
    for i in range(0, len(inputs), batch):
        enc = tok.encode_batch(inputs[i : i + batch])
        feeds.append({
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
        })  # fmt: skip
    return feeds


def _activation_maxima(model, nodes, feeds: list[dict], workdir: Path) -> dict[str, np.ndarray]:
    """Per input channel, the largest |activation| entering each of ``nodes`` over ``feeds``
    (real tokens only: padding positions are masked out)."""
    import onnx  # deferred: keeps onnx out of start-up
    import onnxruntime as ort  # deferred: keeps onnxruntime out of start-up
    from onnx import helper  # deferred: keeps onnx out of start-up

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = list(dict.fromkeys(n.input[0] for n in nodes))
    for name in names:
        probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    path = workdir / "probe.onnx"
    onnx.save_model(probe, str(path), save_as_external_data=True, location=path.name + ".data")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    amax: dict[str, np.ndarray] = {}
    for feed in feeds:
        real = feed["attention_mask"].astype(bool)
        for name, x in zip(names, sess.run(names, feed), strict=True):
            # token states (batch, seq, channels): real tokens only; a cross-encoder's pooler and
            # classifier see one vector per pair (batch, channels)
            rows = x[real] if x.ndim == 3 and x.shape[:2] == real.shape else x.reshape(-1, x.shape[-1])
            cur = np.abs(rows).max(0)
            amax[name] = np.maximum(amax[name], cur) if name in amax else cur
    return amax


def smooth(src: Path, dst: Path, feeds: list[dict], alpha: float = ALPHA) -> Path:
    """The SmoothQuant rewrite of the module docstring, saved to ``dst`` (weights inline)."""
    import onnx  # deferred: keeps onnx out of start-up
    from onnx import helper, numpy_helper  # deferred: keeps onnx out of start-up

    model = onnx.load(str(src))
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    nodes = [n for n in graph.node if n.op_type in SMOOTHED_OPS and len(n.input) > 1 and n.input[1] in inits]
    uses: dict[str, int] = {}
    for n in graph.node:
        for name in n.input:
            uses[name] = uses.get(name, 0) + 1
    nodes = [n for n in nodes if uses[n.input[1]] == 1]  # a weight two products share would be scaled twice
    with tempfile.TemporaryDirectory(prefix="samelang-smooth-") as tmp:
        amax = _activation_maxima(model, nodes, feeds, Path(tmp))
    for i, n in enumerate(nodes):
        n.name = n.name or f"smoothed_{n.op_type}_{i}"  # the new tensors are named after it
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)  # (in, out): rows are input channels
        s = np.maximum(amax[n.input[0]], 1e-5) ** alpha / np.maximum(np.abs(w).max(1), 1e-5) ** (1 - alpha)
        s = np.clip(s, 1e-2, 1e2).astype(np.float32)
        inits[n.input[1]].CopyFrom(numpy_helper.from_array(w * s[:, None], n.input[1]))
        inv = numpy_helper.from_array((1.0 / s).astype(np.float32), f"{n.name}_smooth_inv")
        graph.initializer.append(inv)
        scaled = f"{n.name}_smoothed_input"
        graph.node.insert(list(graph.node).index(n), helper.make_node("Mul", [n.input[0], inv.name], [scaled]))
        n.input[0] = scaled
    onnx.save_model(model, str(dst))
    return dst


def quantise_int8(src: Path, dst: Path, feeds: list[dict] | None) -> Path:
    """SmoothQuant on ``feeds`` (skipped without them), then ONNX Runtime's dynamic quantisation:
    per-channel int8 weights of every MatMul/Attention."""
    from onnxruntime.quantization import QuantType, quantize_dynamic  # deferred: keeps onnxruntime out of start-up

    if feeds:
        src = smooth(src, dst.with_name("smoothed.onnx"), feeds)
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)  # the quantiser logs a generic "consider pre-processing" hint
    try:
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul", "Attention"],
            extra_options={"DefaultTensorType": 1},  # FLOAT: the fused ops' outputs have no inferred type
        )
    finally:
        root.setLevel(level)
    return dst
