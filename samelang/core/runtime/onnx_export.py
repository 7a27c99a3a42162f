"""Exporting a model to ONNX once per fingerprint and precision: the fused BERT graph (ONNX Runtime's
transformer optimizer), its residual layer norms kept unfused, int8 by SmoothQuant + dynamic
quantisation, and beside the graph everything a server needs to run it without torch (the
``tokenizers`` file and ``model.json``). Written to a scratch folder, then renamed."""

from __future__ import annotations

import json
import logging
import tempfile
import time
import warnings
from pathlib import Path

from tokenizers import Tokenizer

from samelang.core.model_folder import model_fingerprint
from samelang.core.runtime.heads import pooled_module, token_window
from samelang.core.runtime.precision import EngineOptions, resolve
from samelang.core.runtime.quantise import RECIPE, calibration_feeds, calibration_texts, quantise_int8
from samelang.primitives.atomic import atomic_dir

# bump when the exported folder changes, so that caches are rebuilt (2: external weights, tokenizer, model.json;
# 3: residual layer norms as Add + LayerNormalization, see _unfuse_skip_layer_norm; 4: model.json records the
# pooling, the score head and the model's positions, see .heads)
ONNX_FORMAT = 4
# ONNX Runtime would fuse them back at session start; the fused CPU kernel is the slow one
DISABLED_ORT_OPTIMIZERS = ["SkipLayerNormFusion"]
MODEL_META = "model.json"
TOKENIZER_FILE = "tokenizer.json"


def precision_variant(precision: str) -> str:
    """What the numbers a model gives at ``precision`` depend on besides its weights: the precision,
    and for int8 the quantisation recipe (:data:`.quantise.RECIPE`). The key of exported graphs, and
    of every cache of embeddings, scores or indexes made with an engine (``engine.variant``)."""
    return f"{precision}-{RECIPE}" if precision == "int8" else precision


def onnx_path(cache: Path, fingerprint: str, kind: str, precision: str) -> Path:
    variant = precision_variant(precision)  # a new int8 recipe: a new graph
    return Path(cache) / "onnx" / f"{fingerprint[:16]}-{kind}-{variant}-v{ONNX_FORMAT}" / "model.onnx"


def _calibration(tokenizer, kind: str, meta: dict | None) -> list[dict] | None:
    """SmoothQuant's calibration batches (:mod:`.quantise`); none without a tokenizer."""
    if tokenizer is None or not meta:
        return None
    inputs = calibration_texts(kind, meta)
    return calibration_feeds(backend_tokenizer(tokenizer), inputs, token_window(meta), int(meta["pad_id"]))


def export_onnx(model, kind: str, precision: str, target: Path, tokenizer=None, meta: dict | None = None) -> Path:
    """Export ``model`` (a transformers BERT-family module) to ONNX, fuse it with ONNX Runtime's
    transformer optimizer, and for int8 smooth and quantise it (:mod:`.quantise`); beside it the tokenizer (a
    transformers fast tokenizer; its ``tokenizers`` backend is saved) and ``meta`` (``model.json``).
    Atomic: ``target``'s folder appears complete or not at all."""
    import onnx  # deferred: keeps onnx out of start-up
    import torch  # deferred: keeps torch out of start-up

    t0 = time.perf_counter()
    cfg = model.config
    with tempfile.TemporaryDirectory(prefix="samelang-onnx-") as tmp, atomic_dir(target.parent) as out:
        raw, fused = Path(tmp) / "raw.onnx", Path(tmp) / "fused.onnx"
        attn = getattr(cfg, "_attn_implementation", None)
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("eager")  # the exporter traces eager attention; ORT fuses it back
        ids = torch.tensor([[0, 100, 200, 2], [0, 300, 2, 1]], dtype=torch.long)
        mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.long)
        try:
            # the tracer's warnings concern python-side shape checks that ORT's fused Attention replaces
            with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    pooled_module(model, kind, meta),
                    (ids, mask),
                    str(raw),
                    input_names=["input_ids", "attention_mask"],
                    output_names=["output"],
                    dynamic_axes={
                        "input_ids": {0: "batch", 1: "seq"},
                        "attention_mask": {0: "batch", 1: "seq"},
                        "output": {0: "batch", 1: "seq"} if kind == Head.SPAN else {0: "batch"},
                    },
                    opset_version=17,
                    dynamo=False,
                )
        finally:
            if attn and hasattr(model, "set_attn_implementation"):
                model.set_attn_implementation(attn)
        _fuse(raw, fused, cfg)
        raw.unlink()
        final = fused
        if precision == "int8":
            final = quantise_int8(fused, Path(tmp) / "final.onnx", _calibration(tokenizer, kind, meta))
        graph = onnx.load(str(final))
        _unfuse_skip_layer_norm(graph)
        _save_with_external_weights(graph, out / target.name)
        if tokenizer is not None:
            (out / TOKENIZER_FILE).write_text(backend_tokenizer(tokenizer).to_str())
        (out / MODEL_META).write_text(json.dumps(meta or {}, indent=1))
        (out / "export.json").write_text(
            json.dumps({"kind": kind, "precision": precision, "seconds": round(time.perf_counter() - t0, 1)})
        )
    return target


def _fuse(raw: Path, fused: Path, cfg) -> None:
    """ONNX Runtime's transformer optimizer over the raw export (fused attention, GELU, layer norms)."""
    from onnxruntime.transformers import optimizer  # deferred: keeps onnxruntime out of start-up
    from onnxruntime.transformers.fusion_options import FusionOptions  # deferred: as above

    # no symbolic shape inference: it serves SkipLayerNormalization's fusion, which the export undoes
    # (_unfuse_skip_layer_norm), and copies every weight several times (e5-small fp32: 19.8 -> 17.6 s on 2 cores);
    # the graph is the same, and the fusion's "symbolic shape inference disabled or failed" is by design here
    fusion = FusionOptions("bert")
    fusion.enable_shape_inference = False
    logging.getLogger("fusion_skiplayernorm").setLevel(logging.ERROR)  # ORT imports its fusions top-level
    opt = optimizer.optimize_model(
        str(raw), model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size,
        optimization_options=fusion,
    )  # fmt: skip
    opt.save_model_to_file(str(fused))


def _unfuse_skip_layer_norm(model) -> None:
    """Rewrite each ``SkipLayerNormalization(x, skip, gamma, beta, bias)`` of the ONNX ``model`` as
    ``LayerNormalization((x + bias) + skip, gamma, beta)``, in place.

    Why: ONNX Runtime's CPU kernel for the fused op (the transformers optimizer makes one per residual,
    24 in e5-small) took a fifth of a 20-passage pass's kernel time at int8 on the 2-core Xeon, while two
    vectorised Adds and the standard LayerNormalization kernel do the same arithmetic: unfused, the int8
    model embedded XQuAD train paragraphs ~26% faster and fp32 ~16% (alternating runs; fp32 outputs
    identical, int8 within cosine 0.99984, its activations' rounding moved). The sessions keep ONNX
    Runtime from fusing them back (``DISABLED_ORT_OPTIMIZERS``). Only the nodes with the one output the
    BERT fusion gives them are rewritten; anything else is left fused."""
    from onnx import helper  # deferred: keeps onnx out of start-up

    nodes, changed = [], 0
    for n in model.graph.node:
        outputs = [o for o in n.output if o]
        if (n.op_type != "SkipLayerNormalization" or len(n.input) != 5 or not n.input[4]
                or outputs != [n.output[0]]):  # fmt: skip
            nodes.append(n)
            continue
        x, skip, gamma, beta, bias = n.input
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-12)
        tag = f"samelang_unfused_ln_{changed}"  # unique even where the fusion left a node unnamed
        biased, summed = f"{tag}_x_plus_bias", f"{tag}_residual"
        nodes += [
            helper.make_node("Add", [x, bias], [biased], name=f"{tag}_add_bias"),
            helper.make_node("Add", [biased, skip], [summed], name=f"{tag}_add_skip"),
            helper.make_node("LayerNormalization", [summed, gamma, beta], [n.output[0]], name=f"{tag}_ln",
                             axis=-1, epsilon=eps),
        ]  # fmt: skip
        changed += 1
    if changed:
        del model.graph.node[:]
        model.graph.node.extend(nodes)


def _save_with_external_weights(model, dst: Path) -> None:
    """Save the graph with its weights in one external file beside it (``model.onnx.data``): ONNX
    Runtime memory-maps external weights instead of copying them, so the resident memory holds
    only the pages a request touches (of e5's 250k-row embedding table, the rows of the tokens
    actually seen), ~0.1 GB instead of ~0.5 GB per fp32 model, and no second copy while loading."""
    import onnx  # deferred: keeps onnx out of start-up

    onnx.save_model(model, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=dst.name + ".data", size_threshold=1024)  # fmt: skip


def backend_tokenizer(tokenizer):
    """A clean copy of a transformers fast tokenizer's ``tokenizers`` backend (no truncation or padding
    left over from earlier calls)."""

    backend = Tokenizer.from_str(getattr(tokenizer, "backend_tokenizer", tokenizer).to_str())
    backend.no_truncation()
    backend.no_padding()
    return backend


def onnx_artefact_ready(path: Path) -> bool:
    """Whether an exported folder holds all a server needs (graph, tokenizer, model.json)."""
    return all((path.parent / f).exists() for f in (path.name, TOKENIZER_FILE, MODEL_META))


def export_pending(options: EngineOptions, device: str, model_dir: Path, cache: Path, kind: str) -> bool:
    """Whether an engine built with these options would export an ONNX graph first (cheap: no weights
    read), so that a server can have it done in another process before it loads."""
    chosen = resolve(options, device, model_dir)
    return chosen.backend == "onnx" and not onnx_artefact_ready(
        onnx_path(cache, model_fingerprint(model_dir), kind, chosen.precision)
    )


def with_tokens(meta: dict, tokenizer) -> dict:
    """``meta`` plus the tokenizer facts the engine needs without transformers: pad id, max length."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    longest = min(int(getattr(tokenizer, "model_max_length", 512) or 512), 512)
    return {"pad_id": int(pad), "max_length": longest, **meta}


def tokenizer_from_file(path: Path):
    return Tokenizer.from_file(str(path))


class Head:
    """What a forward pass returns: pooled token states (bi-encoder), one score per pair, or each
    token's start and end logits (extractive reader) (:func:`.heads.pooled_module`)."""

    EMBED, SCORE, SPAN = "embed", "score", "span"
