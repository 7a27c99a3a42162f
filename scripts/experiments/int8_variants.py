"""Which int8 quantisation keeps the served bi-encoder closest to fp32 (a screen before `samelang eval
precision`, which then measures the chosen variant's retrieval quality).

ONNX Runtime dynamic quantisation of the engine's fused fp32 graph, in variants that leave the
layers known to carry activation outliers in BERT-family models (the attention block, the FFN's
down-projection) in fp32, or narrow the weights to 7 bits (``reduce_range``: no u8s8 overflow on
CPUs without VNNI). Texts: 20 paragraphs and 20 questions per language from the TRAIN articles of
XQuAD's fixed split (seeded; the test articles are never read). Reported: cosine with fp32
(mean, 1st percentile, min) and passages/s on the same paragraphs, medians of 3, on this CPU.

    python scripts/experiments/int8_variants.py [--model DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from samelang.core.catalogue import default_biencoder
from samelang.core.models.encoder import Encoder
from samelang.core.runtime.precision import EngineOptions, cpu_flags
from samelang.corpora import load_xquad
from samelang.service.config import ServiceSettings


def sample(per_lang: int = 20, seed: int = 5):
    data = load_xquad(split="train")
    rng = random.Random(seed)
    paras, questions = [], []
    for lang in sorted({p.lang for p in data.paragraphs}):
        paras += rng.sample([p.text for p in data.paragraphs if p.lang == lang], per_lang)
        questions += rng.sample([q.text for q in data.questions if q.lang == lang], per_lang)
    return paras, questions


def smooth(fp32: Path, dst: Path, feeds: list[dict], alpha: float, which: str = "down") -> Path:
    """SmoothQuant (Xiao et al., 2023) on each FFN down-projection ``Y = X W``: per input channel j,
    ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)`` (X's maxima calibrated on ``feeds``), then
    ``Y = (X / s) (diag(s) W)``, exact in real numbers: the activation's outlier channels shrink, the
    weight's rows grow, and per-tensor int8 activations lose less. X / s is one Mul node (the GELU
    output feeds nothing else; folding it anywhere would change the residual stream)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper

    model = onnx.load(str(fp32))
    g = model.graph
    gelu_out = {o for n in g.node if "Gelu" in n.op_type for o in n.output}
    ops = ("MatMul", "Attention") if which == "all+attention" else ("MatMul",)
    downs = [n for n in g.node if n.op_type in ops and (which != "down" or n.input[0] in gelu_out)]
    downs = [n for n in downs if n.input[1] in {t.name for t in g.initializer}]  # weight x activation only
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for n in downs:
        probe.graph.output.append(helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None))
    tmp = dst.with_suffix(".probe.onnx")
    onnx.save_model(probe, str(tmp), save_as_external_data=True, location=tmp.name + ".data")
    sess = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    names = [n.input[0] for n in downs]
    amax = {k: None for k in names}
    for f in feeds:
        outs = sess.run(names, f)
        m = f["attention_mask"].astype(bool)
        for k, x in zip(names, outs):
            cur = np.abs(x[m]).max(0)
            amax[k] = cur if amax[k] is None else np.maximum(amax[k], cur)
    inits = {t.name: t for t in g.initializer}
    for n in downs:
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        s = np.maximum(amax[n.input[0]], 1e-5) ** alpha / np.maximum(np.abs(w).max(1), 1e-5) ** (1 - alpha)
        s = np.clip(s, 1e-2, 1e2).astype(np.float32)
        inits[n.input[1]].CopyFrom(numpy_helper.from_array(w * s[:, None], n.input[1]))
        inv = numpy_helper.from_array((1.0 / s).astype(np.float32), n.name + "_smooth_inv")
        g.initializer.append(inv)
        scaled = n.input[0] + "_smoothed"
        mul = helper.make_node("Mul", [n.input[0], inv.name], [scaled], name=n.name + "_smooth")
        g.node.insert(list(g.node).index(n), mul)
        n.input[0] = scaled
    onnx.save_model(model, str(dst), save_as_external_data=True, location=dst.name + ".data")
    return dst


def variants(fp32: Path, out: Path, feeds: list[dict]) -> dict[str, Path]:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(fp32), load_external_data=False).graph
    matmuls = [n.name for n in graph.node if n.op_type == "MatMul"]
    # FFN down-projection: the MatMul fed by the GELU (BiasGelu / Gelu / FastGelu) of each layer
    gelu_out = {o for n in graph.node if "Gelu" in n.op_type for o in n.output}
    down = [n.name for n in graph.node if n.op_type == "MatMul" and n.input[0] in gelu_out]
    print(f"{len(matmuls)} MatMul nodes, {len(down)} FFN down-projections", file=sys.stderr)
    specs = {
        "int8 MatMul+Attention (served int8)": dict(op_types_to_quantize=["MatMul", "Attention"]),
        "int8 MatMul only (attention fp32)": dict(op_types_to_quantize=["MatMul"]),
        "int8 MatMul+Attention, 7-bit weights": dict(op_types_to_quantize=["MatMul", "Attention"], reduce_range=True),
        "int8 without FFN down-projection": dict(op_types_to_quantize=["MatMul", "Attention"], nodes_to_exclude=down),
        "int8 MatMul only, without FFN down": dict(op_types_to_quantize=["MatMul"], nodes_to_exclude=down),
    }
    grid = (("down", 0.5), ("down", 0.8), ("down", 0.9), ("all", 0.8), ("all", 0.9), ("all", 0.7),
            ("all+attention", 0.8), ("all+attention", 0.7))  # fmt: skip
    for which, alpha in grid:
        label = {"down": "FFN down", "all": "every MatMul", "all+attention": "every MatMul + QKV"}[which]
        specs[f"int8 MatMul+Attention, SmoothQuant {label} a={alpha}"] = dict(
            op_types_to_quantize=["MatMul", "Attention"],
            src=smooth(fp32, out / f"smooth-{which}-{alpha}.onnx", feeds, alpha, which),
        )
    if only := os.environ.get("INT8_ONLY"):  # a quicker screen: the variants whose name contains this
        specs = {k: v for k, v in specs.items() if only in k or "served" in k}
    paths = {}
    for i, (name, kw) in enumerate(specs.items()):
        src = kw.pop("src", fp32)
        dst = out / f"v{i}.onnx"
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": 1}, **kw)  # fmt: skip
        paths[name] = dst
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=None)
    args = ap.parse_args()
    import onnxruntime as ort

    cfg = ServiceSettings()
    enc = Encoder(args.model or default_biencoder(cfg.home), home=cfg.home, options=EngineOptions(precision="fp32"))
    engine = enc.engine
    fp32 = Path(engine.backend.path)
    paras, questions = sample()
    texts_p = [enc._passage_prompt + t for t in paras]
    texts_q = [enc._query_prompt + t for t in questions]
    isa = {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16"}
    print(f"model {enc.name}; CPU flags: {' '.join(sorted(cpu_flags() & isa))}")

    def run(sess, items):
        out = np.zeros((len(items), enc.dim), dtype=np.float32)
        for idx, ids, mask in engine.padded_batches(items):
            out[idx] = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    so = ort.SessionOptions()
    so.intra_op_num_threads = engine.options.threads or 0
    with tempfile.TemporaryDirectory(prefix="samelang-int8-") as tmp:
        # calibration: other train paragraphs and questions than the ones scored (seed 6)
        calib_p, calib_q = sample(8, seed=6)
        calib = [enc._passage_prompt + t for t in calib_p] + [enc._query_prompt + t for t in calib_q]
        feeds = [{"input_ids": ids, "attention_mask": mask} for _, ids, mask in engine.padded_batches(calib)]
        paths = {"fp32 (reference)": fp32, **variants(fp32, Path(tmp), feeds)}
        ref = None
        rows = []
        for name, path in paths.items():
            sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            vp, vq = run(sess, texts_p), run(sess, texts_q)
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                run(sess, texts_p)
                times.append(time.perf_counter() - t0)
            if ref is None:
                ref = (vp, vq)
            cos = np.concatenate([(vp * ref[0]).sum(1), (vq * ref[1]).sum(1)])
            rows.append((name, cos.mean(), np.percentile(cos, 1), cos.min(), len(paras) / statistics.median(times)))
            print(rows[-1], file=sys.stderr, flush=True)
    print(f"\n{len(paras)} train paragraphs + {len(questions)} train questions (12 languages)\n")
    print("| variant | mean cosine vs fp32 | 1st pct | min | passages/s | x fp32 |\n|---|---:|---:|---:|---:|---:|")
    for name, mean, p1, mn, pps in rows:
        print(f"| {name} | {mean:.5f} | {p1:.5f} | {mn:.5f} | {pps:.1f} | {pps / rows[0][4]:.2f} |")


if __name__ == "__main__":
    main()
