"""The FastAPI application: one router per API dialect (samelang's own in :mod:`.native`, OpenAI's
with Cohere's and Jina's rerank in :mod:`.openai`, text-embeddings-inference's in :mod:`.tei`), each
over its handlers, built once on ``app.state`` from the models loaded at start-up
(:mod:`samelang.service.components`); JSON errors, auth, Prometheus metrics, the OpenAPI schema with
the configured limits. Hot reload is :mod:`.reload`; a server in a thread of this process, :mod:`.server`."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles

from samelang.retrieval.limits import Limits
from samelang.service.api import errors
from samelang.service.api.admission import Admission, AdmissionMiddleware, model_work_routes
from samelang.service.api.dialects import Dialects
from samelang.service.api.middleware import GuardMiddleware, RequestIdMiddleware
from samelang.service.api.native.router import STATIC
from samelang.service.api.native.router import router as native_router
from samelang.service.api.openai.router import router as openai_router
from samelang.service.api.prometheus import Metrics, MetricsMiddleware
from samelang.service.api.reload import watch_index
from samelang.service.api.rerank import router as rerank_router
from samelang.service.api.tei.router import router as tei_router
from samelang.service.components import Components, load_components, micro_batching
from samelang.service.config import ServiceSettings

log = logging.getLogger("samelang")


def _openapi_with_limits(app: FastAPI, cfg: ServiceSettings):
    """The schema with this server's configured limits (:class:`~samelang.retrieval.limits.Limits`, the
    ones its pipeline enforces) where the protocol has only the ceilings."""
    limits = Limits.of(cfg)

    def arrays(prop: dict) -> list[dict]:  # a field that is a list, or one of its anyOf alternatives
        return [sub for sub in prop.get("anyOf", [prop]) if sub.get("type") == "array"]

    def openapi():
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            s = schema["components"]["schemas"]
            docs, chars = limits.rerank_documents, limits.max_document_chars
            s["RerankRequest"]["properties"]["documents"]["maxItems"] = docs
            for sub in s["RerankRequest"]["properties"]["documents"]["items"].get("oneOf", []):
                if sub.get("type") == "string":
                    sub["maxLength"] = chars
            s["RerankDocument"]["properties"]["text"]["maxLength"] = chars
            s["CompatRerankRequest"]["properties"]["documents"]["maxItems"] = docs
            s["TeiRerankRequest"]["properties"]["texts"].update(maxItems=docs)
            s["TeiRerankRequest"]["properties"]["texts"]["items"]["maxLength"] = chars
            for name, field in (("EmbeddingsRequest", "input"), ("EmbedRequest", "inputs")):
                for sub in arrays(s[name]["properties"][field]):
                    sub["maxItems"] = limits.max_embedding_inputs
            for sub in arrays(s["DiagnoseRequest"]["properties"]["queries"]):
                sub["maxItems"] = limits.max_diagnose_queries
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
        app.state.handlers = Dialects.over(pipeline)
        watcher = asyncio.ensure_future(watch_index(app, cfg.index_reload_s)) if cfg.index_reload_s > 0 else None
        try:
            yield
        finally:
            if watcher is not None:
                watcher.cancel()
            app.state.admission.close()  # nothing more is admitted; the queue empties at once
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
    app.state.admission = Admission(cfg.max_concurrent_requests, cfg.max_queued_requests, app.state.metrics)
    app.openapi = _openapi_with_limits(app, cfg)
    errors.install(app)
    routers = [dialect() for dialect in (native_router, rerank_router, openai_router, tei_router)]  # /rerank: both
    for router in routers:
        app.include_router(router)
    app.mount("/audit/assets", StaticFiles(directory=STATIC), name="audit-assets")
    app.add_middleware(
        GuardMiddleware, max_body_bytes=cfg.max_body_bytes, api_key=cfg.api_key, body_timeout_s=cfg.body_timeout_s
    )
    work = model_work_routes(r for router in routers for r in router.routes)
    app.add_middleware(AdmissionMiddleware, admission=app.state.admission, routes=work)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(RequestIdMiddleware)
    return app
