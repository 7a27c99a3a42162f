"""Per-route handlers: map a request model to a call of the retrieval core and its result to a
response model. The core (:mod:`service.pipeline`) never sees these types; the routes in
``app.py`` only await a handler in the thread pool."""

from __future__ import annotations

import numpy as np

from ..errors import BadRequest
from ..metrics.audit import LabelledQuery
from ..pipeline import Hit, Pipeline, Ranked, SearchOptions
from . import protocol as P


def _components(pipeline: Pipeline, ranked: Ranked | None = None) -> P.Components:
    c = pipeline.components()
    if ranked is not None:
        c = {**c, "reranker": pipeline.reranker.name if ranked.reranked else None,
             "candidates": "groups" if ranked.grouped else "documents",
             "lexical_weight": ranked.lexical_weight}  # fmt: skip
    return P.Components(
        retriever=c["retriever"], reranker=c["reranker"], candidates=c["candidates"], lexical_weight=c["lexical_weight"]
    )


def _versions(h: Hit) -> list[P.Version]:
    return [P.Version(id=v.id, lang=v.lang) for v in h.versions]


def cited(hits: list[Hit]) -> list[P.CitedPassage]:
    return [
        P.CitedPassage(
            id=h.doc.id, lang=h.doc.lang, group=h.doc.group, score=h.score, text=h.doc.text, versions=_versions(h)
        )  # fmt: skip
        for h in hits
    ]


class Handlers:
    """Built once per app on ``app.state``; holds the pipeline it maps requests to."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    @staticmethod
    def options(req, k: int, rerank_k: int | None) -> SearchOptions:
        return SearchOptions(
            k=k,
            lang=req.lang,
            langs=tuple(req.langs) if getattr(req, "langs", None) else None,
            rerank=req.rerank,
            rerank_k=rerank_k,
            group_candidates=req.group_candidates,
            language_preference=req.language_preference,
            lexical_weight=req.lexical_weight,
        )

    def search(self, req: P.SearchRequest) -> P.SearchResponse:
        r = self.pipeline.search(req.query, self.options(req, req.k, req.rerank_k))
        hits = [
            P.Hit(
                id=h.doc.id,
                score=h.score,
                lang=h.doc.lang,
                group=h.doc.group,
                text=h.doc.text,
                metadata=h.doc.metadata,
                versions=_versions(h),
            )  # fmt: skip
            for h in r.hits
        ]
        return P.SearchResponse(
            query_lang=r.query_lang,
            query_lang_detected=r.lang_detected,
            components=_components(self.pipeline, r),
            hits=hits,
        )

    def rerank(self, req: P.RerankRequest) -> P.RerankResponse:
        docs = req.normalised_documents()
        scores = self.pipeline.rerank(req.query, [d.text for d in docs])
        order = np.argsort(-scores, kind="stable")[: req.top_n or len(docs)]
        results = [
            P.RerankResult(
                index=int(i),
                id=docs[i].id,
                score=float(scores[i]),
                lang=docs[i].lang or self.pipeline.detect_language(docs[i].text),
                text=docs[i].text if req.return_documents else None,
            )
            for i in order
        ]
        return P.RerankResponse(reranker=self.pipeline.reranker.name, results=results)

    def answer(self, req: P.AnswerRequest) -> P.AnswerResponse:
        rerank_k = req.rerank_k or min(self.pipeline.defaults.rerank_k, req.k)
        ranked, text = self.pipeline.answer(req.query, self.options(req, req.k, rerank_k), req.passages, req.max_tokens)
        return P.AnswerResponse(
            answer=text,
            answer_lang=self.pipeline.detect_language(text) if text else None,
            query_lang=ranked.query_lang,
            generator=self.pipeline.generator.name,
            components=_components(self.pipeline, ranked),
            passages=cited(ranked.hits),
        )

    def diagnose(self, req: P.DiagnoseRequest) -> P.DiagnoseResponse:
        if req.queries is not None:
            queries = [LabelledQuery(q.query, q.lang or "", "", tuple(q.relevant), "") for q in req.queries]
            field = "queries[].relevant"
        else:
            queries, field = self.pipeline.dataset_queries(req.pair, req.split), "pair"
        opts = SearchOptions(
            rerank=req.rerank,
            rerank_k=req.rerank_k,
            group_candidates=req.group_candidates,
            language_preference=req.language_preference,
            lexical_weight=req.lexical_weight,
        )
        if not queries:
            raise BadRequest(field, "no queries")
        out = self.pipeline.diagnose(queries, req.k, opts, field)
        d = self.pipeline.defaults
        grouped = d.group_candidates if req.group_candidates is None else req.group_candidates
        reranked = d.rerank if req.rerank is None else req.rerank
        components = _components(self.pipeline)
        components.reranker = self.pipeline.reranker.name if reranked else None
        components.candidates = "groups" if grouped else "documents"
        weight = d.lexical_weight if req.lexical_weight is None else req.lexical_weight
        components.lexical_weight = weight if weight and self.pipeline.lexical else None
        return P.DiagnoseResponse(
            **{k: v for k, v in out.items() if k not in ("aggregate", "per_query_lang", "queries")},
            reranker=components.reranker,
            components=components,
            aggregate=P.Aggregate(**out["aggregate"]),
            per_query_lang={k: P.Aggregate(**v) for k, v in out["per_query_lang"].items()},
            queries=[P.QueryDiagnosis(**q) for q in out["queries"]],
        )
