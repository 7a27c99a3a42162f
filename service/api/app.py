"""The FastAPI application: models loaded once at start-up onto ``app.state``,
CPU-bound work run in the thread pool, JSON errors, auth, Prometheus metrics."""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from indexes.corpora import XQUAD_LANGS
from indexes.index import OpenIndex, open_index
from indexes.vectors import set_search_threads

from ..config import ServiceSettings
from ..pipeline import Limits, Pipeline, SearchParams
from . import compat_protocol as C
from . import errors
from . import protocol as P
from .handlers import Handlers
from .middleware import GuardMiddleware, RequestIdMiddleware
from .prometheus import Metrics, MetricsMiddleware
from .streaming import stream_events

log = logging.getLogger("samelang")


@dataclass
class Components:
    pipeline: Pipeline
    info: dict = field(default_factory=dict)


def load_components(cfg: ServiceSettings) -> Components:
    """Load encoder, index, reranker, generator and language identifier (slow; once)."""
    from indexes.langid import get_identifier

    from ..models import registry
    from ..models.generation import LlamaCppGenerator, NoGenerator, OpenAIGenerator
    from ..models.reranker import CosineReranker, CrossEncoderReranker
    from ..resources import LoadLedger, rss_mb

    device = cfg.torch_device()
    t0, start_rss = time.perf_counter(), rss_mb()
    ledger = LoadLedger()
    options = cfg.engine_options()
    with ledger.measure("encoder"):
        model = cfg.model or registry.default_biencoder(cfg.home)
        encoder = registry.open_encoder(model, device=device, home=cfg.home, options=options)
    with ledger.measure("index"):
        set_search_threads(cfg.search_threads)  # why 1: see Settings.search_threads
        path = cfg.index or registry.default_index_path(cfg)
        index: OpenIndex = open_index(path, encoder.info, use_gpu=cfg.use_gpu_index, uri=cfg.milvus_uri)
        if getattr(index, "lexical", None) is not None:
            encoder.analyzer  # noqa: B018  (built here, so that its cost is the index's, not a first request's)
    reranker_path = registry.default_reranker(cfg.reranker, cfg.home)
    with ledger.measure("reranker"):
        reranker = (
            CrossEncoderReranker(
                reranker_path, device=device, max_length=cfg.reranker_max_length, home=cfg.home, options=options
            )
            if reranker_path
            else CosineReranker(encoder)
        )
    with ledger.measure("generator"):
        if cfg.generator == "llamacpp":
            gguf = cfg.generator_model or registry.default_generator_path(cfg.home)
            generator = LlamaCppGenerator(gguf, threads=cfg.threads, n_ctx=cfg.generator_ctx)
        elif cfg.generator == "openai":
            generator = OpenAIGenerator(
                cfg.openai_url, cfg.openai_model, cfg.openai_api_key, cfg.openai_timeout, cfg.openai_retries
            )
        else:
            generator = NoGenerator()
    with ledger.measure("language_id"):
        langid = get_identifier(tuple(x.strip() for x in cfg.detect_langs.split(",") if x.strip()))
    limits = Limits.from_settings(cfg)
    pipeline = Pipeline(
        encoder, index, reranker, generator, langid, limits, SearchParams(cfg.ef_search, cfg.nprobe),
        cfg.pipeline_defaults(),
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


def micro_batching(pipeline: Pipeline, cfg: ServiceSettings, metrics: Metrics) -> tuple[Pipeline, list]:
    """``pipeline`` with concurrent queries and rerank pairs gathered by micro-batchers built from
    this app's ``cfg`` and reporting to this app's ``metrics``, and those batchers (closed when the
    app stops). The batchers belong to the app, not to the models it shares with other apps."""
    if not cfg.micro_batching:
        return pipeline, []
    from ..batching import micro_batched

    def on_batch(model: str, n_inputs: int, n_requests: int) -> None:
        metrics.batch.labels(model).observe(n_inputs)
        metrics.batch_requests.labels(model).observe(n_requests)

    return micro_batched(pipeline, cfg.batch_wait_ms, cfg.max_batch_items, on_batch)


def _faiss_build() -> str:
    """The faiss build the process loaded (e.g. ``1.13.2 OPTIMIZE AVX512``): its loader tries the
    most specialised build first, and speed numbers depend on which one it settled on."""
    import faiss

    return f"{faiss.__version__} {faiss.get_compile_options()}"


def fusion_parts(enc) -> dict:
    """A fused retriever's components (:mod:`service.models.fused`): its two models and its knobs."""
    return {"same_language_model": enc.same.name, "cross_language_model": enc.cross.name, **asdict(enc.fusion)}


def measured_defaults() -> dict | None:
    """What ``models/serving.json`` says of the measured default: its row, the rule that chose it,
    its score per collection shape on the test articles and what it is good and bad at."""
    from ..models.registry import SERVED_DEFAULTS

    if not SERVED_DEFAULTS.exists():
        return None
    data = json.loads(SERVED_DEFAULTS.read_text())
    keep = ("chosen", "rule", "good_at", "bad_at", "command")
    return {**{k: data[k] for k in keep if k in data}, "test": data.get("test", {}).get(data.get("chosen"))}


def describe(pipeline: Pipeline, cfg: ServiceSettings) -> dict:
    """What ``/info`` reports: models, index manifest, generator, limits."""
    enc, index, reranker, generator = pipeline.encoder, pipeline.index, pipeline.reranker, pipeline.generator
    rerank_engine = getattr(reranker, "engine", None)
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
            **({"fusion": fusion_parts(enc)} if getattr(enc, "fusion", None) else {}),
            "measured": measured_defaults(),
        },
        "micro_batching": {
            "enabled": cfg.micro_batching,
            "wait_ms": cfg.batch_wait_ms,
            "max_items": cfg.max_batch_items,
        },
        "generator": {"name": generator.name},
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
            "body_bytes": cfg.max_body_bytes,
        },
    }


ERRORS = {
    400: "malformed JSON or a body that is not UTF-8",
    401: "missing or wrong API key (when the server has one)",
    408: "the request body did not arrive in time",
    413: "body larger than the server's limit",
    422: "a field breaks a rule or a limit: the detail names the field and the limit",
    500: "internal error: the detail carries only the request id to look up in the server log",
}
WORK_ERRORS = {**ERRORS, 503: "the request's time budget is spent or the server is shutting down"}
STREAM = {200: {"content": {"text/event-stream": {"schema": {"type": "string", "description": (
    "with stream: true, server-sent events: 'passages' (AnswerPassagesEvent), 'token' (AnswerTokenEvent) as the "
    "answer is generated, then 'done' (AnswerDoneEvent) or 'error' (ErrorResponse)")}}}}}  # fmt: skip
STATIC = Path(__file__).parent / "static"


def _responses(codes: dict[int, str]) -> dict:
    return {c: {"model": P.ErrorResponse, "description": d} for c, d in codes.items()}


async def bounded(request: Request, fn, req):
    """Run ``fn(req)`` in the thread pool under a :class:`~service.work.Budget`: the request's time
    budget, cancelled when the client disconnects or the server shuts down; the model loops stop at
    their next check (see :mod:`service.work`)."""
    import asyncio

    from ..work import Budget, Cancelled

    state = request.app.state
    budget = Budget(state.settings.request_timeout_s)
    state.budgets.add(budget)
    state.metrics.in_progress.inc()
    task = asyncio.ensure_future(run_in_threadpool(budget.run, fn, req))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())  # an abandoned task's end is not an error
    grace = 2.0  # past the deadline, the answer does not wait for a worker stuck between checks
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.1)
            if done:
                return task.result()
            if await request.is_disconnected():
                budget.cancel("disconnected")
            if budget.deadline is not None and time.monotonic() > budget.deadline + grace:
                budget.check()  # raises Cancelled("deadline"); the worker stops at its next check
    except Cancelled as e:
        state.metrics.cancelled.labels(e.reason).inc()
        raise
    except asyncio.CancelledError:  # the server is stopping this request (graceful shutdown ran out)
        budget.cancel("shutdown")
        raise
    finally:
        if task.done():
            state.metrics.in_progress.dec()
        else:  # the worker thread still runs until its next check: count it until then
            task.add_done_callback(lambda _: state.metrics.in_progress.dec())
        state.budgets.discard(budget)


def swap_index(app: FastAPI, index: OpenIndex) -> None:
    """Serve ``index`` from the next request on; requests in flight finish on the pipeline they
    started with, and the old index is closed when the last of them lets go of it. One assignment
    (the handlers, which every route reads) switches everything at once."""
    pipeline = app.state.handlers.pipeline.replace(index=index)
    app.state.handlers = Handlers(pipeline)
    app.state.components = Components(pipeline, app.state.components.info)
    log.info("samelang: serving index generation %s (%d documents)", index.generation, index.documents)


_RELOAD = threading.Lock()


def reload_index(app: FastAPI) -> bool:
    """Open the index's live generation if it is not the one served (another generation, or the
    folder rebuilt: another build id); True when it swapped. One reload at a time."""
    from indexes.index import live_identity

    with _RELOAD:
        pipeline = app.state.handlers.pipeline
        if live_identity(pipeline.index.path) == pipeline.index.identity:
            return False
        cfg = app.state.settings
        index = open_index(pipeline.index.path, pipeline.encoder.info, use_gpu=cfg.use_gpu_index, uri=cfg.milvus_uri)
        if index.identity == pipeline.index.identity:
            index.close()
            return False
        swap_index(app, index)
        return True


async def watch_index(app: FastAPI, every_s: float) -> None:
    """Poll the index's ``CURRENT`` and swap in a new generation (``samelang index add``)."""
    import asyncio

    failed: str | None = None
    while True:
        await asyncio.sleep(every_s)
        try:
            await run_in_threadpool(reload_index, app)
            failed = None
        except Exception as e:  # noqa: BLE001 - a half-written or broken index must not stop the server
            if str(e) != failed:  # once per distinct failure, not every poll
                failed = str(e)
                log.exception("samelang: could not reload the index; still serving generation %s",
                              app.state.handlers.pipeline.index.generation)  # fmt: skip


def handle(request: Request) -> Handlers:
    """The handlers every route reads (one assignment swaps them: :func:`swap_index`)."""
    return request.app.state.handlers


def _router() -> APIRouter:
    r = APIRouter()

    @r.post("/search", response_model=P.SearchResponse, responses=_responses(WORK_ERRORS))
    async def search(req: P.SearchRequest, request: Request):
        return await bounded(request, handle(request).search, req)

    @r.post("/rerank", response_model=P.RerankResponse, responses=_responses(WORK_ERRORS))
    async def rerank(req: P.RerankRequest, request: Request):
        return await bounded(request, handle(request).rerank, req)

    @r.post("/answer", response_model=P.AnswerResponse, responses={**_responses(
        {**WORK_ERRORS, 503: "the generator is down (the retrieved passages come with it), the request's time budget "
                             "is spent, or the server is shutting down"}), **STREAM})  # fmt: skip
    async def answer(req: P.AnswerRequest, request: Request):
        if req.stream:
            return await stream_events(request, handle(request).answer_events, req)
        return await bounded(request, handle(request).answer, req)

    @r.post("/diagnose", response_model=P.DiagnoseResponse, responses=_responses(WORK_ERRORS))
    async def diagnose(req: P.DiagnoseRequest, request: Request):
        return await bounded(request, handle(request).diagnose, req)

    @r.post("/admin/reload", responses=_responses(ERRORS))
    async def admin_reload(request: Request):
        """Serve the index's newest generation now (the server also polls for it)."""
        swapped = await run_in_threadpool(reload_index, request.app)
        idx = handle(request).pipeline.index
        return {"generation": idx.generation, "documents": idx.documents, "reloaded": swapped}

    @r.get("/health")
    async def health():
        return {"status": "ok"}

    @r.get("/ready")
    async def ready(request: Request):
        """Readiness probe (the server accepts connections only once the models are loaded); needs no
        API key: it reveals only the document count."""
        return {"status": "ready", "documents": handle(request).pipeline.index.documents}

    @r.get("/info", responses=_responses({401: ERRORS[401]}))
    async def info(request: Request):
        from ..resources import memory_now

        loaded = request.app.state.components.info
        memory = {**loaded.get("memory", {}), **memory_now()}
        return {**describe(handle(request).pipeline, request.app.state.settings), **loaded, "memory": memory}

    @r.get("/metrics", response_class=PlainTextResponse, responses=_responses({401: ERRORS[401]}))
    async def metrics(request: Request):
        body, ctype = request.app.state.metrics.render()
        return Response(body, media_type=ctype)

    return r


def _compat_router() -> APIRouter:
    """The ecosystem-shaped routes (:mod:`.compat_protocol`) and the bias-audit page."""
    r = APIRouter()

    @r.post("/v1/embeddings", response_model=C.EmbeddingsResponse, responses=_responses(WORK_ERRORS))
    async def embeddings(req: C.EmbeddingsRequest, request: Request):
        """OpenAI's embeddings route over the served bi-encoder (for the OpenAI SDK, LangChain, LlamaIndex)."""
        return await bounded(request, handle(request).embeddings, req)

    async def compat_rerank(req: C.CompatRerankRequest, request: Request):
        """Cohere's and Jina's rerank route over the served reranker (the scores of ``POST /rerank``)."""
        out = await bounded(request, handle(request).compat_rerank, req)
        out.id = errors.request_id(request)
        return out

    for path in ("/v1/rerank", "/v2/rerank"):  # Cohere's v2 client posts to /v2/rerank, Jina and v1 to /v1/rerank
        r.add_api_route(path, compat_rerank, methods=["POST"], response_model=C.CompatRerankResponse,
                        responses=_responses(WORK_ERRORS))  # fmt: skip

    @r.get("/v1/models", response_model=C.ModelList, responses=_responses({401: ERRORS[401]}))
    async def models(request: Request):
        return handle(request).models()

    @r.get("/audit", response_class=HTMLResponse, include_in_schema=False)
    async def audit_page():
        """The bias-audit page (plain HTML and a script, no build step, nothing from a CDN)."""
        return FileResponse(STATIC / "audit.html", media_type="text/html")

    return r


def _openapi_with_limits(app: FastAPI, cfg: ServiceSettings):
    """The schema with this server's configured limits where the protocol has only the ceilings."""
    from fastapi.openapi.utils import get_openapi

    def openapi():
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            props = schema["components"]["schemas"]["RerankRequest"]["properties"]
            props["documents"]["maxItems"] = min(cfg.max_rerank_documents, cfg.max_rerank_pairs, P.MAX_DOCUMENTS)
            for sub in props["documents"]["items"].get("oneOf", []):
                if sub.get("type") == "string":
                    sub["maxLength"] = min(cfg.max_document_chars, P.MAX_DOCUMENT_CHARS)
            doc = schema["components"]["schemas"]["RerankDocument"]["properties"]["text"]
            doc["maxLength"] = min(cfg.max_document_chars, P.MAX_DOCUMENT_CHARS)
            schemas = schema["components"]["schemas"]
            schemas["CompatRerankRequest"]["properties"]["documents"]["maxItems"] = props["documents"]["maxItems"]
            for sub in schemas["EmbeddingsRequest"]["properties"]["input"]["anyOf"]:
                if sub.get("type") == "array":
                    sub["maxItems"] = min(cfg.max_embedding_inputs, C.MAX_EMBEDDING_INPUTS)
            diag = schema["components"]["schemas"]["DiagnoseRequest"]["properties"]["queries"]
            for sub in diag.get("anyOf", [diag]):
                if sub.get("type") == "array":
                    sub["maxItems"] = min(cfg.max_diagnose_queries, P.MAX_DIAGNOSE_QUERIES)
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


@contextmanager
def serve_in_thread(app: FastAPI, host: str = "127.0.0.1", start_timeout: float = 900.0):
    """Serve ``app`` with uvicorn on a free loopback port in a daemon thread; yields its base URL
    (tests and ``samelang eval pipeline`` talk to a real HTTP server this way). ``start_timeout``
    only catches a start that hangs: an app that loads its models at start-up may first export
    them to ONNX (the int8 encoder and a cross-encoder: minutes on 2 busy cores)."""
    import socket
    import threading

    import uvicorn

    with socket.socket() as s:
        s.bind((host, 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.time() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def create_app(cfg: ServiceSettings | None = None, components: Components | None = None) -> FastAPI:
    """The app; ``components`` may be injected (tests share loaded models between apps)."""
    cfg = cfg or ServiceSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        import asyncio

        if getattr(app.state, "components", None) is None:
            app.state.components = await run_in_threadpool(load_components, cfg)
            log.info("samelang ready: %d documents", app.state.components.pipeline.index.documents)
        pipeline, batchers = micro_batching(app.state.components.pipeline, cfg, app.state.metrics)
        app.state.handlers = Handlers(pipeline)
        watcher = asyncio.ensure_future(watch_index(app, cfg.index_reload_s)) if cfg.index_reload_s > 0 else None
        try:
            yield
        finally:
            if watcher is not None:
                watcher.cancel()
            for budget in list(app.state.budgets):  # work still running stops at its next check
                budget.cancel("shutdown")
            for batcher in batchers:
                batcher.close()

    app = FastAPI(
        title="samelang",
        version="0.1.0",
        description="Multilingual retrieval-augmented QA that hands the reader the answer in their language.",
        lifespan=lifespan,
    )
    app.state.components = components
    app.state.metrics = Metrics()
    app.state.settings = cfg
    app.state.budgets = set()
    app.openapi = _openapi_with_limits(app, cfg)
    errors.install(app)
    app.include_router(_router())
    app.include_router(_compat_router())
    app.mount("/audit/assets", StaticFiles(directory=STATIC), name="audit-assets")
    app.add_middleware(
        GuardMiddleware, max_body_bytes=cfg.max_body_bytes, api_key=cfg.api_key, body_timeout_s=cfg.body_timeout_s
    )
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(RequestIdMiddleware)
    return app
