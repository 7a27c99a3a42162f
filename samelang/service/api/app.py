"""The FastAPI application: thin routes over the handlers on ``app.state``, models loaded once at
start-up (:mod:`samelang.service.components`), CPU-bound work in the thread pool, JSON errors, auth,
Prometheus metrics, the OpenAPI schema with the limits. Hot reload is :mod:`.reload`; a server in a
thread of this process, :mod:`.server`."""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles

from samelang.core.resources import memory_now
from samelang.core.work import Budget, Cancelled
from samelang.service.api import compat_protocol as C
from samelang.service.api import errors
from samelang.service.api import protocol as P
from samelang.service.api import tei_protocol as T
from samelang.service.api.handlers import Handlers
from samelang.service.api.middleware import GuardMiddleware, RequestIdMiddleware
from samelang.service.api.prometheus import Metrics, MetricsMiddleware
from samelang.service.api.reload import reload_index, watch_index
from samelang.service.api.streaming import stream_events
from samelang.service.components import Components, describe, load_components, micro_batching
from samelang.service.config import ServiceSettings

log = logging.getLogger("samelang")


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
ANSWER_ERRORS = {
    **WORK_ERRORS,
    422: "invalid request, or generator_refused: the generator refused the prompt (longer than its context; the "
    "passages come with it)",
    503: "the generator is down (the retrieved passages come with it), the request's time budget is spent, or the "
    "server is shutting down",
}
STATIC = Path(__file__).parent / "static"


def _responses(codes: dict[int, str]) -> dict:
    return {c: {"model": P.ErrorResponse, "description": d} for c, d in codes.items()}


async def bounded(request: Request, fn, req):
    """Run ``fn(req)`` in the thread pool under a :class:`~samelang.core.work.Budget`: the request's time
    budget, cancelled when the client disconnects or the server shuts down; the model loops stop at
    their next check (see :mod:`samelang.core.work`)."""

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


def handle(request: Request) -> Handlers:
    """The handlers every route reads (one assignment swaps them: :func:`swap_index`)."""
    return request.app.state.handlers


def _router() -> APIRouter:
    r = APIRouter()

    @r.post("/search", response_model=P.SearchResponse, responses=_responses(WORK_ERRORS))
    async def search(req: P.SearchRequest, request: Request):
        return await bounded(request, handle(request).search, req)

    @r.post("/rerank", response_model=P.RerankResponse | list[T.Rank], responses=_responses(WORK_ERRORS))
    async def rerank(req: T.AnyRerankRequest, request: Request):
        """The served reranker's scores. A body with ``documents`` is samelang's (``RerankRequest``);
        one with ``texts`` is text-embeddings-inference's (``TeiRerankRequest``: a list of
        ``{index, score, text?}`` comes back, best first), so TEI's clients work unchanged."""
        h = handle(request)
        return await bounded(request, h.tei_rerank if isinstance(req, T.TeiRerankRequest) else h.rerank, req)

    @r.post("/answer", response_model=P.AnswerResponse, responses={**_responses(ANSWER_ERRORS), **STREAM})
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
        """samelang's description of what it serves, with text-embeddings-inference's fields beside it
        (``model_id``, ``max_input_length``, ...: those of the served bi-encoder)."""
        loaded = request.app.state.components.info
        memory = {**loaded.get("memory", {}), **memory_now()}
        threads = anyio.to_thread.current_default_thread_limiter().total_tokens
        tei = handle(request).tei_info(int(threads), request.app.version).model_dump()
        return {**tei, **describe(handle(request).pipeline, request.app.state.settings), **loaded, "memory": memory}

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

    async def tei_embed(req: T.EmbedRequest, request: Request):
        """text-embeddings-inference's embed route over the served bi-encoder (for Haystack's TEI embedders,
        LangChain's HuggingFaceEndpointEmbeddings, huggingface_hub's InferenceClient): the vectors of
        ``POST /v1/embeddings``. ``POST /`` is the same route, as TEI serves an embedding model."""
        return await bounded(request, handle(request).tei_embed, req)

    for path in ("/embed", "/"):
        r.add_api_route(path, tei_embed, methods=["POST"], response_model=list[list[float]],
                        responses=_responses(WORK_ERRORS))  # fmt: skip

    @r.post("/tokenize", response_model=list[list[T.SimpleToken]], responses=_responses(WORK_ERRORS))
    async def tei_tokenize(req: T.TokenizeRequest, request: Request):
        """text-embeddings-inference's tokenize route: how the served bi-encoder splits each text."""
        return await bounded(request, handle(request).tei_tokenize, req)

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
            tei = schemas["TeiRerankRequest"]["properties"]["texts"]
            tei["maxItems"] = props["documents"]["maxItems"]
            tei["items"]["maxLength"] = min(cfg.max_document_chars, P.MAX_DOCUMENT_CHARS)
            inputs = (schemas[name]["properties"][field]["anyOf"]
                      for name, field in (("EmbeddingsRequest", "input"), ("EmbedRequest", "inputs")))  # fmt: skip
            for sub in (sub for anyof in inputs for sub in anyof):
                if sub.get("type") == "array":
                    sub["maxItems"] = min(cfg.max_embedding_inputs, C.MAX_EMBEDDING_INPUTS)
            diag = schema["components"]["schemas"]["DiagnoseRequest"]["properties"]["queries"]
            for sub in diag.get("anyOf", [diag]):
                if sub.get("type") == "array":
                    sub["maxItems"] = min(cfg.max_diagnose_queries, P.MAX_DIAGNOSE_QUERIES)
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


def create_app(cfg: ServiceSettings, components: Components | None = None) -> FastAPI:
    """The app over the command's settings; ``components`` may be injected (the evaluation, and tests
    that share loaded models between apps)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
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
