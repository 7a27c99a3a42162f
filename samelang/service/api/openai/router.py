"""The OpenAI-shaped routes and Cohere's and Jina's rerank: thin, each awaits its handler in the
thread pool under the request's budget."""

from __future__ import annotations

from fastapi import APIRouter, Request

from samelang.service.api import errors
from samelang.service.api.openai import protocol as C
from samelang.service.api.routing import ERRORS, WORK_ERRORS, bounded, handlers, responses


def router() -> APIRouter:
    """OpenAI's embeddings and model list, Cohere's and Jina's rerank."""
    r = APIRouter()

    @r.post("/v1/embeddings", response_model=C.EmbeddingsResponse, responses=responses(WORK_ERRORS))
    async def embeddings(req: C.EmbeddingsRequest, request: Request):
        """OpenAI's embeddings route over the served bi-encoder (for the OpenAI SDK, LangChain, LlamaIndex)."""
        return await bounded(request, handlers(request).openai.embeddings, req)

    async def compat_rerank(req: C.CompatRerankRequest, request: Request):
        """Cohere's and Jina's rerank route over the served reranker (the scores of ``POST /rerank``)."""
        out = await bounded(request, handlers(request).openai.rerank, req)
        out.id = errors.request_id(request)
        return out

    for path in ("/v1/rerank", "/v2/rerank"):  # Cohere's v2 client posts to /v2/rerank, Jina and v1 to /v1/rerank
        r.add_api_route(path, compat_rerank, methods=["POST"], response_model=C.CompatRerankResponse,
                        responses=responses(WORK_ERRORS))  # fmt: skip

    @r.get("/v1/models", response_model=C.ModelList, responses=responses({401: ERRORS[401]}))
    async def models(request: Request):
        return handlers(request).openai.models()

    return r
