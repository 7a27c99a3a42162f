"""What a server runs, loaded once: the encoder, the index, the reranker, the generator and the
language identifier, joined into the :class:`~samelang.retrieval.pipeline.Pipeline` (with micro-batching
in front of the models), and ``/info``'s account of them. Apart from the HTTP app so that the
evaluation and the bench load exactly what ``samelang serve`` loads."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import faiss

from samelang.core import catalogue
from samelang.core.catalogue import SERVED_DEFAULTS
from samelang.core.models.contracts import check_capabilities
from samelang.core.models.cross_encoder import CosineReranker, CrossEncoderReranker
from samelang.core.models.generation import LlamaCppGenerator, NoGenerator, OpenAIGenerator
from samelang.core.models.reader import ExtractiveReader
from samelang.core.resources import LoadLedger, rss_mb
from samelang.corpora import XQUAD_LANGS
from samelang.indexes.index import OpenIndex, open_index
from samelang.indexes.vectors import set_search_threads
from samelang.primitives.langid import get_identifier
from samelang.retrieval.limits import Limits
from samelang.retrieval.options import SearchParams
from samelang.retrieval.pipeline import Pipeline
from samelang.retrieval.reading import EXTRACTIVE
from samelang.service.api import fields as P
from samelang.service.api.prometheus import Metrics
from samelang.service.batching import micro_batched
from samelang.service.config import ServiceSettings

log = logging.getLogger("samelang")


@dataclass
class Components:
    pipeline: Pipeline
    info: dict = field(default_factory=dict)


def load_components(cfg: ServiceSettings) -> Components:
    """Load encoder, index, reranker, generator and language identifier (slow; once)."""

    device = cfg.torch_device()
    t0, start_rss = time.perf_counter(), rss_mb()
    ledger = LoadLedger()
    options = cfg.engine_options()
    with ledger.measure("encoder"):
        path = cfg.index or catalogue.default_index_path(cfg)
        encoder = load_encoder(cfg, path, device, options)
    with ledger.measure("index"):
        set_search_threads(cfg.search_threads)  # why 1: see Settings.search_threads
        index: OpenIndex = open_index(path, encoder.info, use_gpu=cfg.use_gpu_index, uri=cfg.milvus_uri)
        if getattr(index, "lexical", None) is not None:
            encoder.analyzer  # noqa: B018  (built here, so that its cost is the index's, not a first request's)
    with ledger.measure("reranker"):
        reranker = load_reranker(cfg, encoder, device, options)
    with ledger.measure("reader"):
        defaults = cfg.pipeline_defaults()
        for role, name in cfg.unmeasured_models().items():
            log.warning("--%s %s: models/serving.json was measured on other models; serving neutral defaults for "
                        "it (%s)", role, name, _neutral_words(role))  # fmt: skip
        reader = load_reader(cfg, device, defaults.answer_mode)
    with ledger.measure("generator"):
        generator = load_generator(cfg)
    with ledger.measure("language_id"):
        langid = get_identifier(tuple(x.strip() for x in cfg.detect_langs.split(",") if x.strip()))
    for role, model in (("bi-encoder", encoder), ("reranker", reranker), ("generator", generator)):
        check_capabilities(model, role)  # what each declares it can do, it has (read, never probed, after this)
    limits = Limits.of(cfg)
    pipeline = Pipeline(
        encoder, index, reranker, generator, langid, limits, SearchParams(cfg.ef_search, cfg.nprobe),
        defaults, reader=reader,
    )  # fmt: skip
    if pipeline.defaults.lexical_weight and pipeline.lexical is None:
        log.warning(
            "the index at %s has no lexical (BM25) half for this model: serving dense retrieval, not the hybrid "
            "default (lexical weight %g); rebuild it with `samelang index build` to serve the measured default",
            index.path, pipeline.defaults.lexical_weight,
        )  # fmt: skip
    info = {
        "load_seconds": round(time.perf_counter() - t0, 2),
        "memory": {"before_load_rss_mb": start_rss, **ledger.report()},
    }
    return Components(pipeline, info)


def load_encoder(cfg: ServiceSettings, index: Path, device: str, options):
    """The bi-encoder ``cfg`` serves ``index`` with: the chosen one, or the model ``samelang adapt`` embedded the
    index again with when it was adapted from the chosen one."""
    model = catalogue.adapted_model(index, catalogue.chosen_biencoder(cfg), cfg.home)
    return catalogue.open_encoder(model, device=device, home=cfg.home, options=options)


def load_reranker(cfg: ServiceSettings, encoder, device: str, options) -> CrossEncoderReranker | CosineReranker:
    """The cross-encoder ``cfg`` names (or the measured defaults'), else the bi-encoder's cosine."""
    path = catalogue.default_reranker(cfg.reranker, cfg.home, cfg.revision)
    if not path:
        return CosineReranker(encoder)
    return CrossEncoderReranker(path, device=device, max_length=cfg.reranker_max_length, home=cfg.home,
                                options=options)  # fmt: skip


def prepare_served_models(cfg: ServiceSettings, log=print) -> dict[str, str]:
    """Load the models ``cfg`` serves (bi-encoder or both parts of a fused one, cross-encoder, reader) once, at
    the numerics this machine serves them with, and let them go: each inference graph is then in the cache
    (on a CPU, the ONNX exports, ~20-30 s each on 2 cores), so that the first ``samelang serve`` only builds
    its index. Why a command: an image build or an install pays this once, not every container's first start.
    Returns each role's model folder."""
    device, options = cfg.torch_device(), cfg.engine_options()
    t0 = time.perf_counter()
    encoder = load_encoder(cfg, cfg.index or catalogue.default_index_path(cfg), device, options)
    reranker = load_reranker(cfg, encoder, device, options)
    reader = load_reader(cfg, device, EXTRACTIVE)  # loaded now, whatever /answer's default mode
    out = {"bi-encoder": str(encoder.path)}
    if isinstance(reranker, CrossEncoderReranker):
        out["reranker"] = str(reranker.path)
    if reader is not None:
        out["reader"] = str(reader.path)
    log(f"served models ready in {time.perf_counter() - t0:.0f} s: {', '.join(f'{k} {v}' for k, v in out.items())}")
    return out


def _neutral_words(role: str) -> str:
    if role == "model":
        return "dense retrieval without BM25, group-aware candidates, no reranker unless --reranker names one"
    return "the reranker's scores alone over the first 20 candidates"


def load_generator(cfg: ServiceSettings):
    """``/answer``'s generator: the embedded GGUF on llama.cpp, an OpenAI-compatible server (probed:
    a problem is logged, and the service starts anyway) or none."""
    if cfg.generator == "llamacpp":
        gguf = cfg.generator_model or catalogue.default_generator_path(cfg.home)
        return LlamaCppGenerator(gguf, threads=cfg.threads, n_ctx=cfg.generator_ctx)
    if cfg.generator == "openai":
        generator = OpenAIGenerator(
            cfg.openai_url, cfg.openai_model, cfg.openai_api_key, cfg.openai_timeout, cfg.openai_retries
        )
        problem = generator.probe()
        if problem:  # the service starts anyway: /answer says the same, with the passages, until it is fixed
            log.warning("--generator openai: %s; /answer returns 503 with the passages until it does", problem)
        return generator
    return NoGenerator()


def load_reader(cfg: ServiceSettings, device: str, answer_mode: str) -> ExtractiveReader | None:
    """The extractive reader ``cfg`` names (or the shipped one), loaded now when ``/answer`` answers
    extractively by default, else on its first extractive request; ``None`` without one."""
    path = catalogue.default_reader(cfg.reader, cfg.home)
    if path is None:
        if cfg.answer_mode == EXTRACTIVE:
            raise ValueError("--answer-mode extractive needs a reader: pass --reader DIR (train one with "
                             "`samelang train reader`)")  # fmt: skip
        return None
    reader = ExtractiveReader(path, device=device, home=cfg.home, max_length=cfg.reader_max_length,
                              options=cfg.engine_options())  # fmt: skip
    return reader.load() if answer_mode == EXTRACTIVE else reader


def reader_info(reader: ExtractiveReader | None) -> dict | None:
    if reader is None:
        return None
    return {"name": reader.name, "path": str(reader.path), "kind": reader.kind, "threshold": reader.threshold,
            **reader.describe()}  # fmt: skip


def micro_batching(pipeline: Pipeline, cfg: ServiceSettings, metrics: Metrics) -> tuple[Pipeline, list]:
    """``pipeline`` with concurrent queries and rerank pairs gathered by micro-batchers built from
    this app's ``cfg`` and reporting to this app's ``metrics``, and those batchers (closed when the
    app stops). The batchers belong to the app, not to the models it shares with other apps."""
    if not cfg.micro_batching:
        return pipeline, []

    def on_batch(model: str, n_inputs: int, n_requests: int) -> None:
        metrics.batch.labels(model).observe(n_inputs)
        metrics.batch_requests.labels(model).observe(n_requests)

    return micro_batched(pipeline, cfg.batch_wait_ms, cfg.max_batch_items, on_batch)


def _faiss_build() -> str:
    """The faiss build the process loaded (e.g. ``1.13.2 OPTIMIZE AVX512``): its loader tries the
    most specialised build first, and speed numbers depend on which one it settled on."""

    return f"{faiss.__version__} {faiss.get_compile_options()}"


def fusion_parts(enc) -> dict:
    """A fused retriever's components (:mod:`samelang.core.models.fused`): its two models and its knobs."""
    return {"same_language_model": enc.same.name, "cross_language_model": enc.cross.name, **asdict(enc.fusion)}


def measured_defaults() -> dict | None:
    """What ``models/serving.json`` says of the measured default: its row, the rule that chose it,
    its score per collection shape on the test articles and what it is good and bad at."""

    if not SERVED_DEFAULTS.exists():
        return None
    data = json.loads(SERVED_DEFAULTS.read_text())
    keep = ("chosen", "rule", "good_at", "bad_at", "command")
    return {**{k: data[k] for k in keep if k in data}, "test": data.get("test", {}).get(data.get("chosen"))}


def describe(pipeline: Pipeline, cfg: ServiceSettings) -> dict:
    """What ``/info`` reports: models, index manifest, generator, limits."""
    enc, index, reranker, generator = pipeline.encoder, pipeline.index, pipeline.reranker, pipeline.generator
    # a cross-encoder runs an engine of its own; the cosine runs the encoder's
    rerank_engine = reranker.engine if reranker.capabilities.scores_pairs else None
    return {
        "encoder": {
            "name": enc.name,
            "path": str(enc.path),
            "fingerprint": enc.fingerprint,
            "dim": enc.dim,
            **enc.engine.describe(),
        },
        "reranker": {
            "name": reranker.name,
            "kind": reranker.kind,
            **(rerank_engine.describe() if rerank_engine else {}),
        },
        "defaults": {
            **pipeline.components(),
            "reranks_by_default": pipeline.defaults.rerank,
            **({"fusion": fusion_parts(enc)} if enc.capabilities.fused else {}),
            "measured": measured_defaults(),
            # models named by flag that the measured defaults were not measured on: neutral defaults for them
            "not_measured_on": cfg.unmeasured_models(),
        },
        "micro_batching": {
            "enabled": cfg.micro_batching,
            "wait_ms": cfg.batch_wait_ms,
            "max_items": cfg.max_batch_items,
        },
        "generator": {"name": generator.name},
        "reader": reader_info(pipeline.reader),
        "answer_mode": pipeline.defaults.answer_mode,
        "index": {
            **index.manifest,
            "path": str(index.path),
            "generation": index.generation,
            "on_gpu": index.on_gpu,
            "store": index.store.kind,
            "faiss": _faiss_build(),
        },  # fmt: skip
        "audit": {  # what GET /audit offers: XQuAD pairs of languages the index holds
            "xquad_langs": [x for x in XQUAD_LANGS if index.manifest.get("counts_per_lang", {}).get(x)],
        },
        "limits": {
            "k": 1000,
            "query_chars": P.MAX_QUERY_CHARS,
            "rerank_documents": pipeline.limits.max_rerank_documents,
            "document_chars": pipeline.limits.max_document_chars,
            "diagnose_queries": pipeline.limits.max_diagnose_queries,
            "rerank_pairs": pipeline.limits.max_rerank_pairs,
            "answer_tokens": pipeline.limits.max_answer_tokens,
            "embedding_inputs": pipeline.limits.max_embedding_inputs,
            "request_timeout_s": cfg.request_timeout_s,
            "concurrent_requests": cfg.max_concurrent_requests,
            "queued_requests": cfg.max_queued_requests,
            "body_bytes": cfg.max_body_bytes,
        },
    }
