"""The handlers of samelang's own routes: each maps a request model to a call of the pipeline and
its result to a response model. The pipeline never sees these types; the routes only await a
handler in the thread pool."""

from __future__ import annotations

import time
from collections.abc import Iterator

from pydantic import BaseModel

from samelang.core.metrics.audit import LabelledQuery
from samelang.retrieval.diagnosis import dataset_queries, diagnose, sample_queries
from samelang.retrieval.errors import BadRequest
from samelang.retrieval.hits import Answered, Ranked
from samelang.retrieval.options import SearchOptions
from samelang.retrieval.pipeline import Pipeline
from samelang.retrieval.prompts import citations
from samelang.retrieval.reading import EXTRACTIVE
from samelang.service.api.common import ranked
from samelang.service.api.native import protocol as P
from samelang.service.api.shared import cited, versions_of


def _components(pipeline: Pipeline, ranked: Ranked | None = None, opts: SearchOptions | None = None) -> P.Components:
    c = pipeline.components(opts)
    if ranked is not None:
        c = {**c, "reranker": pipeline.reranker.name if ranked.reranked else None,
             "candidates": "groups" if ranked.grouped else "documents",
             "lexical_weight": ranked.lexical_weight}  # fmt: skip
    return P.Components(
        retriever=c["retriever"], reranker=c["reranker"], candidates=c["candidates"], lexical_weight=c["lexical_weight"]
    )


class NativeHandlers:
    """``/search``, ``/rerank`` (samelang's body), ``/answer`` (plain and streamed) and ``/diagnose``
    over one pipeline."""

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
                versions=versions_of(h),
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
        results = [
            P.RerankResult(
                index=i, id=docs[i].id, score=score, lang=lang, text=docs[i].text if req.return_documents else None
            )
            for i, score, lang in ranked(self.pipeline, req.query, docs, req.top_n)
        ]
        return P.RerankResponse(reranker=self.pipeline.reranker.name, results=results)

    def answer(self, req: P.AnswerRequest) -> P.AnswerResponse:
        ranked, answered = self.pipeline.answer(
            req.query, self._answer_options(req), req.passages, req.max_tokens, req.answer_mode
        )
        return self._answered(ranked, answered)

    def _answer_options(self, req: P.AnswerRequest) -> SearchOptions:
        return self.options(req, req.k, req.rerank_k or min(self.pipeline.defaults.rerank_k, req.k))

    def _answered(self, ranked: Ranked, answered: Answered) -> P.AnswerResponse:
        text = answered.text
        lang = answered.lang if answered.mode == EXTRACTIVE else (self.pipeline.detect_language(text) if text else None)
        return P.AnswerResponse(
            answer=text,
            answer_lang=lang,
            answer_mode=answered.mode,
            query_lang=ranked.query_lang,
            generator=self.pipeline.generator.name,
            components=_components(self.pipeline, ranked),
            passages=cited(ranked.hits),
            citations=list(answered.cited) if answered.cited is not None else citations(text, ranked.hits),
        )

    def answer_events(self, req: P.AnswerRequest) -> Iterator[tuple[str, BaseModel]]:
        """``/answer`` with ``stream: true``: (event name, payload) as :meth:`Pipeline.answer_stream`
        yields; the ``done`` payload is :meth:`answer`'s response with the timing."""
        t0 = time.perf_counter()
        ranked, first, retrieval_ms = None, None, 0.0
        mode = self.pipeline.answer_mode(req.answer_mode)
        events = self.pipeline.answer_stream(req.query, self._answer_options(req), req.passages, req.max_tokens, mode)
        for ev in events:
            ms = (time.perf_counter() - t0) * 1000
            if isinstance(ev, Ranked):
                ranked, retrieval_ms = ev, ms
                yield "passages", P.AnswerPassagesEvent(
                    query_lang=ev.query_lang, answer_mode=mode, generator=self.pipeline.generator.name,
                    components=_components(self.pipeline, ev), passages=cited(ev.hits),
                )  # fmt: skip
            elif isinstance(ev, Answered):
                timing = P.AnswerTiming(retrieval_ms=retrieval_ms, first_token_ms=first, total_ms=ms)
                yield "done", P.AnswerDoneEvent(**dict(self._answered(ranked, ev)), timing=timing)
            else:
                first = ms if first is None else first
                yield "token", P.AnswerTokenEvent(text=ev)

    def diagnose(self, req: P.DiagnoseRequest) -> P.DiagnoseResponse:
        sources = None
        if req.queries is not None:
            queries = [LabelledQuery(q.query, q.lang or "", "", tuple(q.relevant or ()), "") for q in req.queries]
            field = "queries[].relevant"
        elif req.sample is not None:
            queries, sources = sample_queries(self.pipeline, req.sample, req.seed)
            field = "sample"
        else:
            queries, field = dataset_queries(req.pair, req.split), "pair"
        opts = SearchOptions(
            rerank=req.rerank,
            rerank_k=req.rerank_k,
            group_candidates=req.group_candidates,
            language_preference=req.language_preference,
            lexical_weight=req.lexical_weight,
        )
        if not queries:
            raise BadRequest(field, "no queries")
        out = diagnose(self.pipeline, queries, req.k, opts, field, bias_k=req.bias_k, sources=sources)
        components = _components(self.pipeline, opts=opts)  # what ran: the request's options over the defaults
        return P.DiagnoseResponse(
            **{k: v for k, v in out.items() if k not in ("aggregate", "per_query_lang", "queries", "bias")},
            reranker=components.reranker,
            components=components,
            bias=P.LanguageBias(**out["bias"]),
            aggregate=P.Aggregate(**out["aggregate"]) if out["aggregate"] else None,
            per_query_lang={k: P.Aggregate(**v) for k, v in out["per_query_lang"].items()},
            queries=[P.QueryDiagnosis(**q) for q in out["queries"]],
        )
