"""One inference engine for every encoder forward pass (search, rerank, answer, index build, eval): on a 2-core CPU
the forward pass is the whole cost, and four things decide it, alike for bi- and cross-encoders:

* **batches of at most ``max_batch_tokens`` padded tokens**, length-sorted, so none pads a short text to a long one;
* **precision**: ``fp32``, ``int8`` (ONNX Runtime dynamic quantisation), ``bf16``/``fp16`` (torch; fp16 on GPU only);
  ``auto`` reads the folder's inference record (:mod:`.folder`), else fp32 on CPU, bf16 (or fp16) on GPU;
* **backend**: ``onnx`` (ONNX Runtime's fused BERT graph, residual layer norms unfused) or ``torch`` (the GPU's);
* **batches in flight**: on ONNX, ``parallel_batches`` passes at once, each on cores / ``parallel_batches`` threads
  (:func:`lane_threads`), so a pass's ~150 small operators need no meeting of threads (``docs/design.md``).

An ONNX graph (one per model fingerprint and precision, in ``$SAMELANG_HOME/cache/onnx``) is self-contained: weights,
``tokenizer.json`` and ``model.json``; so a server on ONNX never imports torch and holds one copy of the model.
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from tqdm.auto import tqdm

from samelang.core import budget
from samelang.core.model_folder import model_fingerprint
from samelang.core.runtime.heads import pooled_module, templated_pairs, token_window
from samelang.core.runtime.onnx_export import (
    DISABLED_ORT_OPTIMIZERS,
    MODEL_META,
    TOKENIZER_FILE,
    Head,
    backend_tokenizer,
    export_onnx,
    onnx_artefact_ready,
    onnx_path,
    precision_variant,
    tokenizer_from_file,
    with_tokens,
)
from samelang.core.runtime.precision import EngineOptions, resolve

log = logging.getLogger("samelang")


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


@runtime_checkable
class Backend(Protocol):
    """One forward pass of a model on padded token ids: ONNX Runtime's session (CPU, the served path)
    or torch (GPU, bf16); mean-pooled embeddings or one logit per row, as numpy."""

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray: ...


class TorchBackend:
    def __init__(self, model, kind: str, precision: str, device: str, meta: dict | None = None):
        import torch  # deferred: keeps torch out of start-up

        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
        self.device = device
        self.module = pooled_module(model, kind, meta).to(device=device, dtype=dtype)

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        import torch  # deferred: keeps torch out of start-up

        with torch.inference_mode():
            ids = torch.from_numpy(input_ids).to(self.device)
            mask = torch.from_numpy(attention_mask).to(self.device)
            return self.module(ids, mask).float().cpu().numpy()


def lane_threads(lanes: int) -> int:
    """ONNX Runtime intra-op threads per forward pass when ``lanes`` passes run at once: the cores this
    process may use, shared out, so that lanes x threads = cores (on 2 cores: 1 each). Why not every
    core per pass: each of the ~150 small operators of a pass is a parallel section whose threads must
    meet, which costs more CPU than a 20-token query's work; two single-threaded lanes do the same
    work with no meeting at all."""

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, lanes))


class OnnxBackend:
    def __init__(self, path: Path, threads: int | None):
        import onnxruntime as ort  # deferred: keeps onnxruntime out of start-up

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

    ``kind`` is ``"embed"`` (mean-pooled, L2-normalised embeddings), ``"score"`` (one logit
    per pair, through ``activation``) or ``"span"`` (an extractive reader's start and end logits per
    token, of rows the reader tokenised itself: :meth:`run_tokens`).

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
        if kind not in (Head.EMBED, Head.SCORE, Head.SPAN):
            raise ValueError(f"kind must be 'embed', 'score' or 'span', got {kind!r}")
        self.options = resolve(options, device, model_dir)
        self.kind, self.activation = kind, activation
        if self.options.backend == "onnx":
            path = onnx_path(cache, fingerprint, kind, self.options.precision)
            if not onnx_artefact_ready(path):
                log.warning("samelang: exporting %s (%s) to ONNX %s once, ~1 min ...", kind, self.options.precision,
                            path.parent)  # fmt: skip
                module, tokenizer, meta = load()
                export_onnx(module, kind, self.options.precision, path, tokenizer, with_tokens(meta, tokenizer))
                del module  # the server keeps ONNX Runtime's copy of the weights, not torch's too
            self.meta = json.loads((path.parent / MODEL_META).read_text())
            self.tokenizer = tokenizer_from_file(path.parent / TOKENIZER_FILE)  # saved clean: no copy (~0.3 GB)
            self.backend: Backend = OnnxBackend(
                path, self.options.threads or lane_threads(self.options.parallel_batches)
            )
        else:
            if self.options.threads:
                import torch  # deferred: keeps torch out of start-up

                torch.set_num_threads(self.options.threads)
            module, tokenizer, meta = load()
            self.meta = with_tokens(meta, tokenizer)
            self.tokenizer = backend_tokenizer(tokenizer)
            self.backend = TorchBackend(module, kind, self.options.precision, device, self.meta)
        # never past the model's own positions: a longer --reranker-max-length is cut to them
        self.max_length = token_window(self.meta, max_length)
        self.pad_id = int(self.meta["pad_id"])
        self.left_padded = self.meta.get("padding_side") == "left"
        self.template = self.meta.get("template")  # a causal-LM reranker's (prefix, middle, suffix)
        if self.template is None:
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

    def _encode_templated(self, pairs: list) -> list[tuple[list[int], bool]]:
        """A causal-LM reranker's pairs in its template (:func:`.heads.templated_pairs`), tokenised
        whole, as sentence-transformers renders them."""

        def encode(texts):
            return self.tokenizer.encode_batch(texts, add_special_tokens=False)

        texts, cut = templated_pairs(pairs, self.template, encode, self.max_length)
        return [(e.ids, c) for e, c in zip(encode(texts), cut)]

    def _encode(self, inputs: list) -> list[tuple[list[int], bool]]:
        """(token ids, whether the input was cut to the window) of each input."""
        if self.template is not None:
            return self._encode_templated(inputs)
        if self.kind == Head.SCORE:
            enc = self.tokenizer.encode_batch([(str(a), str(b)) for a, b in inputs])
        else:
            enc = self.tokenizer.encode_batch([str(t) for t in inputs])
        return [(e.ids, bool(e.overflowing)) for e in enc]

    def _tokenise(self, inputs: list) -> list[list[int]]:
        return [ids for ids, _ in self._encode(inputs)]

    def token_counts(self, inputs: list) -> list[int]:
        """Tokens each input is run as (special tokens counted, after truncation): the ``usage`` that
        the OpenAI- and Cohere-shaped routes report."""
        return [len(x) for x in self._tokenise(inputs)] if inputs else []

    def overflowing(self, inputs: list) -> list[bool]:
        """Whether each input is longer than the model's window (and so would be cut): what a route
        that promises not to cut (TEI's ``truncate: false``) refuses."""
        return [cut for _, cut in self._encode(inputs)]

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
        return self._padded(self._tokenise(inputs))

    def _padded(self, ids: list[list[int]]):
        lengths = [len(x) for x in ids]
        for batch in token_batches(lengths, self.options.max_batch_tokens, self.options.max_batch_size):
            width = max(lengths[i] for i in batch)
            input_ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            for r, i in enumerate(batch):
                at = slice(width - lengths[i], width) if self.left_padded else slice(0, lengths[i])
                input_ids[r, at] = ids[i]
                mask[r, at] = 1
            yield batch, input_ids, mask

    def run(self, inputs: list, progress: bool = False, raw: bool = False) -> np.ndarray:
        """Embeddings (n, dim) or scores (n,) for ``inputs`` (texts, or (query, document) pairs);
        ``raw``: the mean-pooled embeddings before L2 normalisation, the logits before the activation."""
        if self.kind == Head.SPAN:
            raise ValueError("a 'span' engine reads a reader's windows: run_tokens, not run")
        if len(inputs) == 0:
            return np.zeros((0,) if self.kind == Head.SCORE else (0, 0), dtype=np.float32)
        out: np.ndarray | None = None
        bar = tqdm(total=len(inputs), desc=f"{self.kind} ({self.precision})", unit="input", disable=not progress)
        for batch, y in self._forward(self.padded_batches(inputs)):
            if out is None:
                out = np.zeros((len(inputs), y.shape[1]), dtype=np.float32)
            out[batch] = y
            bar.update(len(batch))
        bar.close()
        if self.kind == Head.SCORE:
            s = out[:, 0]
            return self.activation(s) if self.activation is not None and not raw else s
        return out if raw else out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def run_tokens(self, ids: list[list[int]]) -> list[np.ndarray]:
        """The per-token outputs of rows the caller tokenised itself (a reader's windows: a question
        and a stretch of passage each), in token-bounded batches like :meth:`run`'s: one
        ``(len(row), outputs)`` array per row, padding cut off."""
        if self.kind != Head.SPAN:
            raise ValueError(f"run_tokens reads per-token outputs: a 'span' engine's, not {self.kind!r}")
        out: list = [None] * len(ids)
        for batch, y in self._forward(self._padded(ids)):
            width = y.shape[1]
            for r, i in enumerate(batch):
                at = slice(width - len(ids[i]), width) if self.left_padded else slice(0, len(ids[i]))
                out[i] = y[r, at]
        return out

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
        budget.check()  # a request whose budget is spent stops here, between batches
        return np.asarray(self.backend(input_ids, mask), dtype=np.float32)

    def _runner_pool(self, lanes: int):
        """The engine's runner threads, made on first use (shared by every call: at most ``lanes``
        forward passes of multi-batch calls run at once, however many requests make them)."""
        with _POOL_LOCK:
            pool = getattr(self, "_pool", None)
            if pool is None:
                pool = self._pool = ThreadPoolExecutor(lanes, thread_name_prefix=f"samelang-{self.kind}")
                weakref.finalize(self, pool.shutdown, wait=False)  # an engine let go takes its threads along
            return pool


_POOL_LOCK = threading.Lock()


def sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def cache_dir(home: Path) -> Path:
    """``$SAMELANG_HOME/cache``: exported ONNX graphs, embedding and score caches."""
    return Path(home) / "cache"


def engine_for(load, kind: str, folder: Path, home: Path, options: EngineOptions | None, device: str, **kw):
    """The engine of a model folder: keyed on the folder's fingerprint (``fingerprint=`` when the caller
    has it already: a folder without a manifest is hashed whole), its exports cached under ``home``;
    fp32 unless ``options`` say otherwise (the training and evaluation reference)."""
    options = options or EngineOptions(precision="fp32")
    fingerprint = kw.pop("fingerprint", None) or model_fingerprint(folder)
    return InferenceEngine(load, kind, fingerprint, cache_dir(home), options, device=device, model_dir=folder, **kw)
