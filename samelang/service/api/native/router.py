"""samelang's own routes: thin, each awaits its handler (:mod:`.handlers`) in the thread pool under
the request's budget. ``POST /rerank``, which takes TEI's body too, is :mod:`samelang.service.api.rerank`'s."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response

from samelang.core.resources import memory_now
from samelang.service.api.native import protocol as P
from samelang.service.api.reload import reload_index
from samelang.service.api.routing import ERRORS, WORK_ERRORS, bounded, handlers, responses
from samelang.service.api.streaming import stream_events
from samelang.service.components import describe

STATIC = Path(__file__).parents[1] / "static"
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


def router() -> APIRouter:
    """samelang's own routes, with the operational ones (:func:`operations`)."""
    r = APIRouter()

    @r.post("/search", response_model=P.SearchResponse, responses=responses(WORK_ERRORS))
    async def search(req: P.SearchRequest, request: Request):
        return await bounded(request, handlers(request).native.search, req)

    @r.post("/answer", response_model=P.AnswerResponse, responses={**responses(ANSWER_ERRORS), **STREAM})
    async def answer(req: P.AnswerRequest, request: Request):
        if req.stream:
            return await stream_events(request, handlers(request).native.answer_events, req)
        return await bounded(request, handlers(request).native.answer, req)

    @r.post("/diagnose", response_model=P.DiagnoseResponse, responses=responses(WORK_ERRORS))
    async def diagnose(req: P.DiagnoseRequest, request: Request):
        return await bounded(request, handlers(request).native.diagnose, req)

    r.include_router(operations())
    return r


def operations() -> APIRouter:
    """Health, readiness, what is served, metrics, reload, and the bias-audit page."""
    r = APIRouter()

    @r.post("/admin/reload", responses=responses(ERRORS))
    async def admin_reload(request: Request):
        """Serve the index's newest generation now (the server also polls for it)."""
        swapped = await run_in_threadpool(reload_index, request.app)
        idx = handlers(request).pipeline.index
        return {"generation": idx.generation, "documents": idx.documents, "reloaded": swapped}

    @r.get("/health")
    async def health():
        return {"status": "ok"}

    @r.get("/ready")
    async def ready(request: Request):
        """Readiness probe (the server accepts connections only once the models are loaded); needs no
        API key: it reveals only the document count."""
        return {"status": "ready", "documents": handlers(request).pipeline.index.documents}

    @r.get("/info", responses=responses({401: ERRORS[401]}))
    async def info(request: Request):
        """samelang's description of what it serves, with text-embeddings-inference's fields beside it
        (``model_id``, ``max_input_length``, ...: those of the served bi-encoder)."""
        loaded = request.app.state.components.info
        memory = {**loaded.get("memory", {}), **memory_now()}
        admitted = request.app.state.admission.max_running
        tei = handlers(request).tei.info(admitted, request.app.version).model_dump()
        return {**tei, **describe(handlers(request).pipeline, request.app.state.settings), **loaded, "memory": memory}

    @r.get("/metrics", response_class=PlainTextResponse, responses=responses({401: ERRORS[401]}))
    async def metrics(request: Request):
        body, ctype = request.app.state.metrics.render()
        return Response(body, media_type=ctype)

    @r.get("/audit", response_class=HTMLResponse, include_in_schema=False)
    async def audit_page():
        """The bias-audit page (plain HTML and a script, no build step, nothing from a CDN)."""
        return FileResponse(STATIC / "audit.html", media_type="text/html")

    return r
