"""``POST /rerank``: samelang's body (``documents``) and text-embeddings-inference's (``texts``) on one path,
because every TEI client posts to ``{url}/rerank``. It belongs to neither dialect: the body's content picks the
handler, so this route sits above both (the app composes it), and neither dialect imports the other."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import Discriminator, Tag

from samelang.service.api.native import protocol as P
from samelang.service.api.routing import WORK_ERRORS, bounded, handlers, responses
from samelang.service.api.tei import protocol as T


def _rerank_body(v) -> str:
    """Which ``POST /rerank`` body this is: TEI's has ``texts``, samelang's ``documents``."""
    return "tei" if isinstance(v, dict) and "texts" in v else "samelang"


# the tag never shows in an error's field name (errors._field drops it): "texts[2]", not "tei.texts[2]"
AnyRerankRequest = Annotated[
    Annotated[P.RerankRequest, Tag("samelang")] | Annotated[T.TeiRerankRequest, Tag("tei")],
    Discriminator(_rerank_body),
]


def router() -> APIRouter:
    r = APIRouter()

    @r.post("/rerank", response_model=P.RerankResponse | list[T.Rank], responses=responses(WORK_ERRORS))
    async def rerank(req: AnyRerankRequest, request: Request):
        """The served reranker's scores. A body with ``documents`` is samelang's (``RerankRequest``);
        one with ``texts`` is text-embeddings-inference's (``TeiRerankRequest``: a list of
        ``{index, score, text?}`` comes back, best first), so TEI's clients work unchanged."""
        h = handlers(request)
        return await bounded(request, h.tei.rerank if isinstance(req, T.TeiRerankRequest) else h.native.rerank, req)

    return r
