"""One inference engine for every encoder forward pass: search, rerank, answer, index build, eval.

Why one engine: on a 2-core CPU the forward pass is the whole cost, and three things decide it,
the same for the bi-encoder and the cross-encoder:

* **batches bounded by padded tokens, not by count**: inputs are tokenised once, sorted by length
  and cut into batches of at most ``max_batch_tokens`` padded tokens, so no batch pads a short text
  to a long one and activations stay in cache (here 8 x 184-token passages run ~1.7x faster per
  passage than sentence-transformers' 32);
* **precision**: ``fp32`` (reference), ``int8`` (ONNX Runtime dynamic quantisation, per-channel
  int8 weights of every MatMul/Attention, activations quantised per batch), ``bf16``/``fp16``
  (torch; bf16 is native only on CPUs with AVX512_BF16/AMX, elsewhere emulated and slow; fp16 on
  GPU only);
* **backend**: ``onnx`` (ONNX Runtime with its fused BERT graph: one Attention and BiasGelu kernel per
  layer; the residual layer norms stay Add + LayerNormalization, see :func:`_unfuse_skip_layer_norm`) or
  ``torch`` (eager/SDPA; the only one on GPU);
* **batches in flight**: on ONNX a call with several batches keeps ``parallel_batches`` (2) forward
  passes running at once on runner threads (ONNX Runtime's ``run`` is thread-safe and releases the
  GIL), each pass on cores / ``parallel_batches`` threads (:func:`lane_threads`: 1 on 2 cores). Spread
  over both cores, each of a pass's ~150 small operators (layer norms, GELU, the per-batch int8
  activation quantisation) is a parallel section whose threads must meet; two single-threaded lanes do
  the same work with no meeting. On the 2-core Xeon (AMX, int8, alternating runs) this took 20 XQuAD
  passages from ~0.74 to ~0.57-0.61 s, 160 passages from ~60 to ~70/s, and the server's CPU per
  ``/search`` from ~17 to ~12 ms; a lone query runs on one lane.

``precision="auto"`` takes what the model folder's inference record (:mod:`.folder`) holds as the fastest
precision within 0.3 points of fp32 on the eval tables (written by ``samelang eval precision``),
and when there is none fp32 on CPU, bf16 (fp16 where the GPU lacks bf16) on GPU. ONNX graphs are
exported once per model fingerprint and precision into ``$SAMELANG_HOME/cache/onnx`` (written to a
scratch folder, then renamed).

**An exported graph is self-contained**: its folder holds ``model.onnx``, the tokenizer
(``tokenizer.json``, the ``tokenizers`` library's own format) and ``model.json`` (pad id, maximum
length and what the caller needs, e.g. the embedding size and e5 prompts). So a process that serves
from ONNX never loads the torch weights, nor imports torch: the model is read once, at export, and
the server keeps one copy of it (ONNX Runtime's), not two. Tokenisation is the ``tokenizers``
library's ``encode_batch`` with the same truncation as transformers' fast tokenizer (``longest_first``,
right side), which is what transformers calls underneath.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import tempfile
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from indexes.atomic import atomic_dir

from .. import work
from ..config import MAX_BATCH_TOKENS, PARALLEL_BATCHES
from .folder import recorded_precision
from .quantise import RECIPE, calibration_feeds, calibration_texts, quantise_int8

log = logging.getLogger("samelang")

PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
BACKENDS = ("auto", "torch", "onnx")
# bump when the exported folder changes, so that caches are rebuilt (2: external weights, tokenizer, model.json;
# 3: residual layer norms as Add + LayerNormalization, see _unfuse_skip_layer_norm)
ONNX_FORMAT = 3
# ONNX Runtime would fuse them back at session start; the fused CPU kernel is the slow one
DISABLED_ORT_OPTIMIZERS = ["SkipLayerNormFusion"]
MODEL_META, TOKENIZER_FILE = "model.json", "tokenizer.json"

# Recorded tolerances against fp32 (tests/service/models/test_engine.py checks them on multilingual
# texts): minimum cosine of embeddings, maximum absolute difference of sigmoid reranker scores.
EMBEDDING_MIN_COSINE = {"fp32": 0.9999, "bf16": 0.99, "fp16": 0.99, "int8": 0.99}
SCORE_MAX_ABS_DIFF = {"fp32": 1e-4, "bf16": 0.03, "fp16": 0.03, "int8": 0.2}  # int8: up to 0.155 seen on XQuAD


class EngineConfigError(ValueError):
    """A precision/backend combination this host cannot run (message says which flag to change)."""


@dataclass(frozen=True)
class EngineOptions:
    """How to run a model (each is a ``samelang serve`` flag with a ``SAMELANG_*`` twin)."""

    precision: str = "auto"
    backend: str = "auto"
    max_batch_tokens: int = MAX_BATCH_TOKENS  # padded tokens per forward pass (documented in service.config)
    max_batch_size: int = 64
    threads: int | None = None
    parallel_batches: int = PARALLEL_BATCHES  # passes of one call in flight (ONNX; documented in service.config)

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise EngineConfigError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.backend not in BACKENDS:
            raise EngineConfigError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.max_batch_tokens < 16 or self.max_batch_size < 1:
            raise EngineConfigError("max_batch_tokens must be >= 16 and max_batch_size >= 1")
        if self.parallel_batches < 1:
            raise EngineConfigError("parallel_batches must be >= 1")


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_class(flags: set[str] | None = None) -> str:
    """The class of CPU a precision choice holds for, from the instruction sets that decide int8 and
    bf16 speed and int8 numerics: ``x86-amx`` (AMX int8/bf16 tiles), ``x86-avx512-vnni``,
    ``x86-avx-vnni``, ``x86-avx2`` (int8 through u8s8 pairs that can saturate), else the machine.
    Why classes and not one "cpu" entry: int8 is ~1.7x fp32 with AMX and ~1.2x on AVX2, and on AVX2 its
    kernels round differently, so a choice measured on one class does not hold on another."""
    import platform

    f = cpu_flags() if flags is None else flags
    if {"amx_int8", "amx_tile"} <= f:
        return "x86-amx"
    if "avx512_vnni" in f:
        return "x86-avx512-vnni"
    if "avx_vnni" in f:
        return "x86-avx-vnni"
    if "avx2" in f:
        return "x86-avx2"
    return platform.machine() or "unknown"


def precision_device(device: str) -> str:
    """The key of ``device``'s choice in a model's inference record: ``cuda``, or ``cpu:<class>``."""
    return "cuda" if device.startswith("cuda") else f"cpu:{cpu_class()}"


def cpu_has_bf16() -> bool:
    """Native bf16 matmuls on this CPU (AVX512_BF16 or AMX); elsewhere torch emulates them, slowly."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def resolve(options: EngineOptions, device: str, model_dir: Path | None = None) -> EngineOptions:
    """Concrete precision and backend for ``device``; raises EngineConfigError for impossible pairs."""
    precision = options.precision
    on_gpu = device.startswith("cuda")
    if precision == "auto":
        # no choice recorded for this GPU / this class of CPU: fp32 on CPU (the reference, safe on every
        # class), half precision on GPU (tensor cores)
        precision = recorded_precision(model_dir, precision_device(device)) or (_gpu_half() if on_gpu else "fp32")
    backend = options.backend
    if backend == "auto":
        backend = "onnx" if (not on_gpu and precision in ("fp32", "int8") and _has_onnxruntime()) else "torch"
    if precision == "int8" and (backend != "onnx" or on_gpu):
        raise EngineConfigError("precision int8 runs on the CPU with --backend onnx (needs onnxruntime)")
    if backend == "onnx" and on_gpu:
        raise EngineConfigError("--backend onnx is CPU only here; use --backend torch on GPU")
    if backend == "onnx" and precision not in ("fp32", "int8"):
        raise EngineConfigError(f"--backend onnx runs fp32 or int8, not {precision}")
    if precision == "fp16" and not on_gpu:
        raise EngineConfigError("precision fp16 needs a GPU (--device cuda); on CPU use fp32, int8 or bf16")
    if precision == "bf16" and not on_gpu and not cpu_has_bf16():
        log.warning("this CPU has no native bf16 (AVX512_BF16/AMX): bf16 is emulated and slow")
    if backend == "onnx" and not _has_onnxruntime():
        raise EngineConfigError("--backend onnx needs onnxruntime: pip install onnxruntime")
    return replace(options, precision=precision, backend=backend)


def _gpu_half() -> str:
    import torch

    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"


def _has_onnxruntime() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


# ------------------------------------------------------------------------------------------- batching
def token_batches(lengths: list[int], max_tokens: int, max_size: int) -> list[np.ndarray]:
    """Indices grouped longest first into batches whose padded size (n x longest) stays within
    ``max_tokens`` (a longer text still gets a batch of its own)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, cur, cur_max = [], [], 0
    for i in order:
        if cur and (max(cur_max, lengths[i]) * (len(cur) + 1) > max_tokens or len(cur) >= max_size):
            batches.append(np.asarray(cur))
            cur, cur_max = [], 0
        cur.append(i)
        cur_max = max(cur_max, lengths[i])
    if cur:
        batches.append(np.asarray(cur))
    return batches


# ------------------------------------------------------------------------------------------- backends
class _Head:
    """What a forward pass returns: mean-pooled token states (bi-encoder) or the first logit."""

    EMBED, SCORE = "embed", "score"


def _wrapper(model, kind: str):
    import torch

    class Pooled(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            if kind == _Head.SCORE:
                return self.m(input_ids=input_ids, attention_mask=attention_mask).logits[:, :1]
            h = self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(h.dtype)
            return (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    return Pooled(model).eval()


class TorchBackend:
    def __init__(self, model, kind: str, precision: str, device: str):
        import torch

        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        self.device = device
        self.module = _wrapper(model, kind).to(device=device, dtype=dtype)

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        import torch

        with torch.inference_mode():
            ids = torch.from_numpy(input_ids).to(self.device)
            mask = torch.from_numpy(attention_mask).to(self.device)
            return self.module(ids, mask).float().cpu().numpy()


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
    return calibration_feeds(_backend_tokenizer(tokenizer), inputs, int(meta["max_length"]), int(meta["pad_id"]))


def export_onnx(model, kind: str, precision: str, target: Path, tokenizer=None, meta: dict | None = None) -> Path:
    """Export ``model`` (a transformers BERT-family module) to ONNX, fuse it with ONNX Runtime's
    transformer optimizer, and for int8 smooth and quantise it (:mod:`.quantise`); beside it the tokenizer (a
    transformers fast tokenizer; its ``tokenizers`` backend is saved) and ``meta`` (``model.json``).
    Atomic: ``target``'s folder appears complete or not at all."""
    import onnx
    import torch
    from onnxruntime.transformers import optimizer

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
                    _wrapper(model, kind),
                    (ids, mask),
                    str(raw),
                    input_names=["input_ids", "attention_mask"],
                    output_names=["output"],
                    dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}},
                    opset_version=17,
                    dynamo=False,
                )
        finally:
            if attn and hasattr(model, "set_attn_implementation"):
                model.set_attn_implementation(attn)
        opt = optimizer.optimize_model(
            str(raw), model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size
        )
        opt.save_model_to_file(str(fused))
        raw.unlink()
        final = fused
        if precision == "int8":
            final = quantise_int8(fused, Path(tmp) / "final.onnx", _calibration(tokenizer, kind, meta))
        graph = onnx.load(str(final))
        _unfuse_skip_layer_norm(graph)
        _save_with_external_weights(graph, out / target.name)
        if tokenizer is not None:
            (out / TOKENIZER_FILE).write_text(_backend_tokenizer(tokenizer).to_str())
        (out / MODEL_META).write_text(json.dumps(meta or {}, indent=1))
        (out / "export.json").write_text(
            json.dumps({"kind": kind, "precision": precision, "seconds": round(time.perf_counter() - t0, 1)})
        )
    return target


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
    from onnx import helper

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
    import onnx

    onnx.save_model(model, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=dst.name + ".data", size_threshold=1024)  # fmt: skip


def _backend_tokenizer(tokenizer):
    """A clean copy of a transformers fast tokenizer's ``tokenizers`` backend (no truncation or padding
    left over from earlier calls)."""
    from tokenizers import Tokenizer

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
    from .folder import model_fingerprint

    chosen = resolve(options, device, model_dir)
    return chosen.backend == "onnx" and not onnx_artefact_ready(
        onnx_path(cache, model_fingerprint(model_dir), kind, chosen.precision)
    )


def lane_threads(lanes: int) -> int:
    """ONNX Runtime intra-op threads per forward pass when ``lanes`` passes run at once: the cores this
    process may use, shared out, so that lanes x threads = cores (on 2 cores: 1 each). Why not every
    core per pass: each of the ~150 small operators of a pass is a parallel section whose threads must
    meet, which costs more CPU than a 20-token query's work; two single-threaded lanes do the same
    work with no meeting at all."""
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, lanes))


class OnnxBackend:
    def __init__(self, path: Path, threads: int | None):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads or 0  # 0: ONNX Runtime's default, one thread per physical core
        so.inter_op_num_threads = 1
        # idle worker threads sleep instead of spinning: the encoder and the reranker share two cores
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            str(path), so, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_ORT_OPTIMIZERS
        )
        self.path = path

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"input_ids": input_ids, "attention_mask": attention_mask})[0]


# --------------------------------------------------------------------------------------------- engine
class InferenceEngine:
    """Tokenise, sort by length, run token-bounded batches on the chosen backend, restore order.

    ``kind`` is ``"embed"`` (mean-pooled, L2-normalised embeddings) or ``"score"`` (one logit
    per pair, through ``activation``).

    ``load()`` returns ``(module, tokenizer, meta)``: the transformers module, its fast tokenizer and
    what the caller wants remembered with an export (``meta``, e.g. prompts and embedding size). It
    is called only when the run needs the weights: the torch backend, or an ONNX graph not yet
    exported. ``self.meta`` is that dict either way (read back from ``model.json`` when served from
    a finished export), with ``pad_id`` and ``max_length`` added."""

    def __init__(
        self,
        load,
        kind: str,
        fingerprint: str,
        cache: Path,
        options: EngineOptions = EngineOptions(),
        device: str = "cpu",
        max_length: int | None = None,
        model_dir: Path | None = None,
        activation=None,
    ):
        if kind not in (_Head.EMBED, _Head.SCORE):
            raise ValueError(f"kind must be 'embed' or 'score', got {kind!r}")
        self.options = resolve(options, device, model_dir)
        self.kind, self.activation = kind, activation
        if self.options.backend == "onnx":
            path = onnx_path(cache, fingerprint, kind, self.options.precision)
            if not onnx_artefact_ready(path):
                log.warning("samelang: exporting %s (%s) to ONNX %s once, ~1 min ...", kind, self.options.precision,
                            path.parent)  # fmt: skip
                module, tokenizer, meta = load()
                export_onnx(module, kind, self.options.precision, path, tokenizer, _with_tokens(meta, tokenizer))
                del module  # the server keeps ONNX Runtime's copy of the weights, not torch's too
            self.meta = json.loads((path.parent / MODEL_META).read_text())
            self.tokenizer = _tokenizer_from_file(path.parent / TOKENIZER_FILE)  # saved clean: no copy (~0.3 GB)
            self.backend = OnnxBackend(path, self.options.threads or lane_threads(self.options.parallel_batches))
        else:
            if self.options.threads:
                import torch

                torch.set_num_threads(self.options.threads)
            module, tokenizer, meta = load()
            self.meta = _with_tokens(meta, tokenizer)
            self.tokenizer = _backend_tokenizer(tokenizer)
            self.backend = TorchBackend(module, kind, self.options.precision, device)
        self.max_length = int(max_length or self.meta["max_length"])
        self.pad_id = int(self.meta["pad_id"])
        self.tokenizer.enable_truncation(self.max_length)  # longest_first, right: transformers' default

    @property
    def precision(self) -> str:
        return self.options.precision

    @property
    def variant(self) -> str:
        """:func:`precision_variant` of this engine: what its outputs' caches key on."""
        return precision_variant(self.options.precision)

    @property
    def backend_name(self) -> str:
        return self.options.backend

    def describe(self) -> dict:
        o = self.options
        return {
            "precision": o.precision,
            "backend": o.backend,
            "max_batch_tokens": o.max_batch_tokens,
            "parallel_batches": o.parallel_batches if o.backend == "onnx" else 1,
        }

    def _tokenise(self, inputs: list) -> list[list[int]]:
        if self.kind == _Head.SCORE:
            return [e.ids for e in self.tokenizer.encode_batch([(str(a), str(b)) for a, b in inputs])]
        return [e.ids for e in self.tokenizer.encode_batch([str(t) for t in inputs])]

    def token_counts(self, inputs: list) -> list[int]:
        """Tokens each input is run as (special tokens counted, after truncation): the ``usage`` that
        the OpenAI- and Cohere-shaped routes report."""
        return [len(x) for x in self._tokenise(inputs)] if inputs else []

    def truncate_text(self, text: str, n_tokens: int) -> str:
        """``text`` cut after its first ``n_tokens`` tokens (special tokens not counted), at a
        character boundary the tokenizer reports: Cohere's ``max_tokens_per_doc``."""
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        if len(enc.ids) <= n_tokens:
            return text
        return text[: enc.offsets[n_tokens - 1][1]]

    def padded_batches(self, inputs: list):
        """(indices, input_ids, attention_mask) per token-bounded batch, longest first: what
        :meth:`run` feeds the backend (and what a profiler replays)."""
        ids = self._tokenise(inputs)
        lengths = [len(x) for x in ids]
        for batch in token_batches(lengths, self.options.max_batch_tokens, self.options.max_batch_size):
            width = max(lengths[i] for i in batch)
            input_ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for r, i in enumerate(batch):
                input_ids[r, : lengths[i]] = ids[i]
                mask[r, : lengths[i]] = 1
            yield batch, input_ids, mask

    def run(self, inputs: list, progress: bool = False) -> np.ndarray:
        """Embeddings (n, dim) or scores (n,) for ``inputs`` (texts, or (query, document) pairs)."""
        if len(inputs) == 0:
            return np.zeros((0,) if self.kind == _Head.SCORE else (0, 0), dtype=np.float32)
        out: np.ndarray | None = None
        bar = tqdm(total=len(inputs), desc=f"{self.kind} ({self.precision})", unit="input", disable=not progress)
        for batch, y in self._forward(self.padded_batches(inputs)):
            if out is None:
                out = np.zeros((len(inputs), y.shape[1]), dtype=np.float32)
            out[batch] = y
            bar.update(len(batch))
        bar.close()
        if self.kind == _Head.SCORE:
            s = out[:, 0]
            return self.activation(s) if self.activation is not None else s
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def _forward(self, batches):
        """(indices, outputs) per batch. On ONNX up to ``parallel_batches`` batches run at once on the
        engine's runner threads (each under a copy of the caller's context, so a request's budget still
        stops it between batches); at most twice that many padded batches exist at a time, so a large
        index build does not pad its whole corpus up front. The torch backend (a GPU queue) runs them
        one by one."""
        lanes = self.options.parallel_batches if self.options.backend == "onnx" else 1
        it = iter(batches)
        head = list(itertools.islice(it, 2))
        if lanes == 1 or len(head) < 2:  # one batch (a query, a short /rerank): no hand-off to a thread
            for batch, input_ids, mask in itertools.chain(head, it):
                yield batch, self._checked_call(input_ids, mask)
            return
        pool = self._runner_pool(lanes)
        pending: list = []
        try:
            for batch, input_ids, mask in itertools.chain(head, it):
                if len(pending) >= 2 * lanes:
                    done, fut = pending.pop(0)
                    yield done, fut.result()
                ctx = contextvars.copy_context()  # one copy per task: a Context cannot be entered twice at once
                pending.append((batch, pool.submit(ctx.run, self._checked_call, input_ids, mask)))
            while pending:
                batch, fut = pending.pop(0)
                yield batch, fut.result()
        finally:  # an error or a spent budget: drop what has not started, wait for what has
            for _, fut in pending:
                fut.cancel()
            for _, fut in pending:
                if not fut.cancelled():
                    try:
                        fut.exception()
                    except BaseException:  # noqa: BLE001 - only waiting for the thread to be free again
                        pass

    def _checked_call(self, input_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        work.check()  # a request whose budget is spent stops here, between batches
        return np.asarray(self.backend(input_ids, mask), dtype=np.float32)

    def _runner_pool(self, lanes: int):
        """The engine's runner threads, made on first use (shared by every call: at most ``lanes``
        forward passes of multi-batch calls run at once, however many requests make them)."""
        with _POOL_LOCK:
            pool = getattr(self, "_pool", None)
            if pool is None:
                from concurrent.futures import ThreadPoolExecutor

                pool = self._pool = ThreadPoolExecutor(lanes, thread_name_prefix=f"samelang-{self.kind}")
                weakref.finalize(self, pool.shutdown, wait=False)  # an engine let go takes its threads along
            return pool


_POOL_LOCK = threading.Lock()


def _with_tokens(meta: dict, tokenizer) -> dict:
    """``meta`` plus the tokenizer facts the engine needs without transformers: pad id, max length."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    longest = min(int(getattr(tokenizer, "model_max_length", 512) or 512), 512)
    return {"pad_id": int(pad), "max_length": longest, **meta}


def _tokenizer_from_file(path: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)
