"""The routes shaped like text-embeddings-inference: ``/embed`` (and ``/``, TEI's default route of an
embedding model) and ``/tokenize``. Its ``/rerank`` body and its ``/info`` fields are served by
samelang's own routes of those paths (:mod:`samelang.service.api.native.router`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from samelang.service.api.routing import WORK_ERRORS, bounded, handlers, responses
from samelang.service.api.tei import protocol as T


def router() -> APIRouter:
    """TEI's embed and tokenize routes."""
    r = APIRouter()

    async def tei_embed(req: T.EmbedRequest, request: Request):
        """text-embeddings-inference's embed route over the served bi-encoder (for Haystack's TEI embedders,
        LangChain's HuggingFaceEndpointEmbeddings, huggingface_hub's InferenceClient): the vectors of
        ``POST /v1/embeddings``. ``POST /`` is the same route, as TEI serves an embedding model."""
        return await bounded(request, handlers(request).tei.embed, req)

    for path in ("/embed", "/"):
        r.add_api_route(path, tei_embed, methods=["POST"], response_model=list[list[float]],
                        responses=responses(WORK_ERRORS))  # fmt: skip

    @r.post("/tokenize", response_model=list[list[T.SimpleToken]], responses=responses(WORK_ERRORS))
    async def tei_tokenize(req: T.TokenizeRequest, request: Request):
        """text-embeddings-inference's tokenize route: how the served bi-encoder splits each text."""
        return await bounded(request, handlers(request).tei.tokenize, req)

    return r
