"""Per-route handlers: map a request model to a call of the retrieval core and its result to a
response model. The core (:mod:`samelang.service.pipeline`) never sees these types; the routes in
``app.py`` only await a handler in the thread pool."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from pydantic import BaseModel

from samelang.core.metrics.audit import LabelledQuery
from samelang.core.models.reranker import BI_ENCODER_COSINE
from samelang.indexes.vectors import normalise
from samelang.service.api import compat_protocol as C
from samelang.service.api import protocol as P
from samelang.service.api import tei_protocol as T
from samelang.service.diagnosis import dataset_queries, diagnose, sample_queries
from samelang.service.errors import BadRequest
from samelang.service.pipeline import Pipeline
from samelang.service.prompts import citations
from samelang.service.reading import EXTRACTIVE
from samelang.service.results import Answered, Hit, Ranked, SearchOptions


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

    def _ranked(self, query: str, docs: list, top_n: int | None) -> list[tuple[int, float, str | None]]:
        """(index, score, language) of the best ``top_n`` documents by the served reranker: what
        ``/rerank`` and the Cohere-shaped route share."""
        scores = self.pipeline.rerank(query, [d.text for d in docs])
        order = np.argsort(-scores, kind="stable")[: top_n or len(docs)]
        return [(int(i), float(scores[i]), docs[i].lang or self.pipeline.detect_language(docs[i].text)) for i in order]

    def rerank(self, req: P.RerankRequest) -> P.RerankResponse:
        docs = req.normalised_documents()
        results = [
            P.RerankResult(
                index=i, id=docs[i].id, score=score, lang=lang, text=docs[i].text if req.return_documents else None
            )
            for i, score, lang in self._ranked(req.query, docs, req.top_n)
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

    # -- ecosystem-shaped routes (compat_protocol) -------------------------------------------
    def _model(self, given: str | None, served: str, field: str = "model") -> None:
        if given is not None and given != served:
            raise BadRequest(field, f"{given!r} is not served here; this server serves {served!r} (GET /v1/models)")

    def embeddings(self, req: C.EmbeddingsRequest) -> C.EmbeddingsResponse:
        enc = self.pipeline.encoder
        self._model(req.model, enc.name)
        if req.dimensions is not None and req.dimensions != enc.dim:
            raise BadRequest("dimensions", f"{req.dimensions} is not supported: {enc.name} has {enc.dim} dimensions "
                             "and cannot shorten them; omit the field")  # fmt: skip
        texts = req.texts()
        self._check_inputs("input", texts)
        passages, direct = req.input_type == "passage", enc.unbatched  # up to 256 texts of any length: no batcher
        vecs = normalise(direct.encode_passages(texts) if passages else direct.encode_queries(texts)).astype("<f4")
        tokens = sum(enc.count_tokens(texts, passages=passages))
        data = [
            C.Embedding(
                index=i,
                embedding=base64.b64encode(v.tobytes()).decode() if req.encoding_format == "base64" else v.tolist(),
            )  # fmt: skip
            for i, v in enumerate(vecs)
        ]
        return C.EmbeddingsResponse(data=data, model=enc.name, usage=C.Usage(prompt_tokens=tokens, total_tokens=tokens))

    def compat_rerank(self, req: C.CompatRerankRequest) -> C.CompatRerankResponse:
        reranker = self.pipeline.reranker
        self._model(req.model, reranker.name)
        given = docs = req.normalised_documents()
        self.pipeline.check_rerank([d.text for d in docs])  # the limits hold for the documents as sent
        if req.max_tokens_per_doc is not None:
            docs = [d.model_copy(update={"text": reranker.truncate(d.text, req.max_tokens_per_doc)}) for d in docs]
        results = [
            C.CompatRerankResult(
                index=i,
                relevance_score=score,
                lang=lang,
                document=C.RerankedDocument(text=given[i].text) if req.return_documents else None,
            )  # fmt: skip
            for i, score, lang in self._ranked(req.query, docs, req.top_n)
        ]
        usage = C.RerankUsage(total_tokens=reranker.count_tokens(req.query, [d.text for d in docs]))
        return C.CompatRerankResponse(model=reranker.name, results=results, usage=usage)

    def models(self) -> C.ModelList:
        enc, reranker = self.pipeline.encoder, self.pipeline.reranker
        made = int(Path(enc.path).stat().st_mtime)
        rerank_path = getattr(reranker, "path", None)
        return C.ModelList(data=[
            C.ModelCard(id=enc.name, created=made, task="embeddings", dimensions=enc.dim),
            C.ModelCard(id=reranker.name, created=int(Path(rerank_path).stat().st_mtime) if rerank_path else made,
                        task="rerank"),
        ])  # fmt: skip

    def _check_inputs(self, field: str, texts: list[str]) -> None:
        """The texts of one embedding or tokenize request: at most ``max_embedding_inputs`` (a 422 naming the field)."""
        cap = self.pipeline.limits.max_embedding_inputs
        if len(texts) > cap:
            raise BadRequest(field, f"{len(texts)} texts, at most {cap} per request")

    # -- TEI-shaped routes (tei_protocol) ---------------------------------------------------
    def _uncut(self, field: str, long: list[bool], window: int, what: str = "text") -> None:
        """TEI's ``truncate: false``: a 422 naming the first input over the model's window."""
        if any(long):
            i = long.index(True)
            raise BadRequest(f"{field}[{i}]", f"the {what} is longer than the model's {window}-token window; "
                             "send truncate: true to cut it")  # fmt: skip

    def tei_embed(self, req: T.EmbedRequest) -> list[list[float]]:
        """``POST /embed``: ``/v1/embeddings``' vectors for the same texts and prompt, as TEI's list
        (``normalize: false``: the same vectors before their L2 normalisation)."""
        enc = self.pipeline.encoder.unbatched
        texts = list(req.inputs)
        self._check_inputs("inputs", texts)
        prompt = req.prompt(enc)
        if not req.truncate:
            self._uncut("inputs", enc.engine.overflowing([prompt + t for t in texts]), enc.engine.max_length)
        # normalize: false (Haystack's TEI embedders' default): the pooled vectors as they are
        vecs = enc.encode_text(texts, prompt, pooled=not req.normalize)
        return (normalise(vecs) if req.normalize else vecs).astype("<f4").tolist()

    def tei_tokenize(self, req: T.TokenizeRequest) -> list[list[T.SimpleToken]]:
        """``POST /tokenize``: the served bi-encoder's tokens of each text (the named prompt's first, the
        special ones unless ``add_special_tokens`` is false); offsets are into the text as sent."""
        enc = self.pipeline.encoder.unbatched
        self._check_inputs("inputs", req.inputs)
        prompt = req.prompt(enc)
        out = []
        for text in req.inputs:
            e = enc.engine.tokenizer.encode(prompt + text, add_special_tokens=req.add_special_tokens)
            toks = []
            for tid, tok, (a, b), special in zip(e.ids, e.tokens, e.offsets, e.special_tokens_mask, strict=True):
                own = not special and b > len(prompt)  # a token of the text (not of the prompt)
                start, stop = (max(a - len(prompt), 0), b - len(prompt)) if own else (None, None)
                toks.append(T.SimpleToken(id=tid, text=text[start:stop] if own else tok, special=bool(special),
                                          start=start, stop=stop))  # fmt: skip
            out.append(toks)
        return out

    def tei_rerank(self, req: T.TeiRerankRequest) -> list[T.Rank]:
        """``POST /rerank`` with ``texts``: ``/rerank``'s scores as TEI's list, best first."""
        reranker = self.pipeline.reranker
        self.pipeline.check_rerank(req.texts)
        if not req.truncate:
            long = reranker.overflowing(req.query, req.texts)
            self._uncut("texts", long, reranker.max_length, "query with this text")
        if req.raw_scores and reranker.kind != BI_ENCODER_COSINE:  # the logits under the sigmoid
            scores = np.asarray(reranker.logits(req.query, req.texts), dtype=np.float64)
        else:
            scores = self.pipeline.rerank(req.query, req.texts)
        order = np.argsort(-scores, kind="stable")
        return [T.Rank(index=int(i), score=float(scores[i]), text=req.texts[i] if req.return_text else None)
                for i in order]  # fmt: skip

    def tei_info(self, concurrent: int, version: str) -> T.TeiInfo:
        """TEI's ``GET /info`` fields for the served bi-encoder (``concurrent``: the thread pool's size,
        what bounds the model work running at once; ``version``: the app's)."""
        enc = self.pipeline.encoder.unbatched
        o = enc.engine.options
        return T.TeiInfo(
            model_id=enc.name, model_sha=enc.fingerprint, model_dtype=o.precision,
            model_type=T.ModelType(embedding={"pooling": "mean"}), max_concurrent_requests=concurrent,
            max_input_length=enc.engine.max_length, max_batch_tokens=o.max_batch_tokens, max_batch_requests=None,
            max_client_batch_size=self.pipeline.limits.max_embedding_inputs, auto_truncate=False,
            tokenization_workers=1, version=version,
        )  # fmt: skip

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
        d = self.pipeline.defaults
        grouped = d.group_candidates if req.group_candidates is None else req.group_candidates
        reranked = d.rerank if req.rerank is None else req.rerank
        components = _components(self.pipeline)
        components.reranker = self.pipeline.reranker.name if reranked else None
        components.candidates = "groups" if grouped else "documents"
        weight = d.lexical_weight if req.lexical_weight is None else req.lexical_weight
        components.lexical_weight = weight if weight and self.pipeline.lexical else None
        return P.DiagnoseResponse(
            **{k: v for k, v in out.items() if k not in ("aggregate", "per_query_lang", "queries", "bias")},
            reranker=components.reranker,
            components=components,
            bias=P.LanguageBias(**out["bias"]),
            aggregate=P.Aggregate(**out["aggregate"]) if out["aggregate"] else None,
            per_query_lang={k: P.Aggregate(**v) for k, v in out["per_query_lang"].items()},
            queries=[P.QueryDiagnosis(**q) for q in out["queries"]],
        )
