"""The retrieval core behind every route: search, rerank and answer. Candidates come from
:mod:`.candidates`; the diagnosis (:mod:`.diagnosis`), the prompts (:mod:`.prompts`) and the
extractive reading (:mod:`.reading`) live apart. It knows no HTTP types: each API dialect's
handlers map requests to these calls and results to responses, and ``samelang eval`` calls the
very same methods, so what is evaluated is what is served.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np

from samelang.core.models.contracts import Reranker, TextEncoder
from samelang.core.models.generation import GeneratorRefused, GeneratorUnavailable, join_answer
from samelang.indexes.index import OpenIndex
from samelang.primitives.langid import LanguageIdentifier
from samelang.retrieval.candidates import Candidates, RowRetriever, preference
from samelang.retrieval.errors import AnswerUnavailable, BadRequest
from samelang.retrieval.hits import Answered, Hit, Ranked
from samelang.retrieval.limits import Limits
from samelang.retrieval.model_calls import ModelCalls
from samelang.retrieval.options import Defaults, Resolved, SearchOptions, SearchParams, resolve
from samelang.retrieval.prompts import fit_prompt
from samelang.retrieval.reading import EXTRACTIVE, extract, prepare_extract, read

# Below this detector confidence a *detected* query language does not choose a group's version: the
# retriever's best version does. On the XQuAD train questions (9,792, 12 languages) 57% of the wrong
# detections and 1% of the right ones fall below 0.5 (the test articles were not looked at).
MIN_READER_CONFIDENCE = 0.5


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-6)


def fuse_scores(reranker: np.ndarray, retriever: np.ndarray, weight: float) -> np.ndarray:
    """``z(reranker) + weight * z(retriever)`` over one query's reranked candidates. Why: a
    cross-encoder and the retriever err on different candidates (the cross-encoder judges the words of
    one pair, the fused retriever knows where each language's answer tends to be), and their z-scores
    share a scale whatever either model's range; the weight is chosen by the shape judge on the dev
    articles (``samelang eval pipeline --shapes``)."""
    return _z(np.asarray(reranker, np.float64)) + weight * _z(np.asarray(retriever, np.float64))


class Pipeline(ModelCalls):
    """Search (candidates, then the reranker, fused with the retriever's score), rerank and answer
    over the served components, and the calls on the models themselves (:class:`~.model_calls.ModelCalls`):
    the one façade every dialect calls; built once per index generation."""

    def __init__(
        self,
        encoder: TextEncoder,
        index: OpenIndex,
        reranker: Reranker,
        generator,
        langid: LanguageIdentifier,
        limits: Limits,
        search_params: SearchParams | None = None,
        defaults: Defaults | None = None,
        reader=None,
    ):
        self.encoder, self.index, self.reranker, self.generator = encoder, index, reranker, generator
        self.reader = reader  # an extractive reader (samelang.core.models.reader), or None
        self.langid, self.limits, self.search_params = langid, limits, search_params or SearchParams()
        self.defaults = defaults or Defaults()
        self.candidates = Candidates(RowRetriever(encoder, index, self.search_params))

    @property
    def doc_langs(self) -> np.ndarray:
        """Language of every indexed document, in row order (``None`` where unknown)."""
        return self.candidates.doc_langs

    @property
    def lexical(self):
        """The index's BM25 half with the encoder's analyzer, or ``None`` (dense only)."""
        return self.candidates.retriever.lexical

    def replace(self, **changes) -> Pipeline:
        """A pipeline sharing these components except ``changes`` (e.g. another generator)."""
        parts = dict(encoder=self.encoder, index=self.index, reranker=self.reranker, generator=self.generator,
                     langid=self.langid, limits=self.limits, search_params=self.search_params,
                     defaults=self.defaults, reader=self.reader)  # fmt: skip
        return Pipeline(**{**parts, **changes})

    def resolve(self, opts: SearchOptions) -> Resolved:
        """``opts`` over the served defaults (:func:`~samelang.retrieval.options.resolve`)."""
        return resolve(opts, self.defaults, self.lexical is not None)

    def components(self, opts: SearchOptions | None = None) -> dict:
        """The names of what serves a request with ``opts`` (none: a default request; every response carries
        them)."""
        r = self.resolve(opts or SearchOptions())
        return {
            "retriever": self.encoder.name,
            "lexical_weight": r.lexical_weight if r.lexical_weight and self.lexical else None,
            "reranker": self.reranker.name if r.rerank else None,
            "rerank_k": r.rerank_k if r.rerank else None,
            "rerank_fusion": r.rerank_fusion if r.rerank else None,
            "candidates": "groups" if r.grouped else "documents",
            "reader": self.reader.name if self.reader is not None else None,
        }

    # -- retrieval -------------------------------------------------------------------------
    def query_language(self, query: str, lang: str | None) -> tuple[str | None, bool]:
        lang, detected, _ = self._query_language(query, lang)
        return lang, detected

    def _query_language(self, query: str, lang: str | None) -> tuple[str | None, bool, float]:
        """(language, detected?, confidence): a given language is certain."""
        if lang:
            return lang, False, 1.0
        det = self.langid.detect(query)
        return (det.lang, True, det.confidence) if det else (None, True, 0.0)

    def _rerank_scores(self, query: str, qvec: np.ndarray, hits: list[Hit]) -> np.ndarray:
        """The reranker's scores of ``hits``; the bi-encoder cosine reuses the index's vectors
        (same model) instead of embedding the passages again."""
        r = self.reranker
        if r.capabilities.scores_vectors and r.encoder is self.encoder:
            vecs = self.index.vectors([h.doc.row for h in hits])
            if vecs is not None:
                return r.score_vectors(qvec[0], vecs)
        return np.asarray(r.score(query, [h.doc.text for h in hits]), dtype=np.float64)

    def search(self, query: str, opts: SearchOptions, qvec: np.ndarray | None = None) -> Ranked:
        r = self.resolve(opts)
        rerank, rerank_k, grouped = r.rerank, r.rerank_k, r.grouped
        if rerank and rerank_k > self.limits.max_rerank_pairs:
            raise BadRequest(
                "rerank_k", f"{rerank_k} reranker pairs, at most {self.limits.max_rerank_pairs} per request"
            )
        qlang, detected, confidence = self._query_language(query, opts.lang)
        if qvec is None:
            qvec = self.encoder.encode_queries([query])
        lexical = self.candidates.retriever.lexical_query(query, r.lexical_weight, opts.langs)
        n = max(opts.k, rerank_k)  # the candidates a reranker sees, whether or not one runs (candidate recall)
        reader = qlang if confidence >= MIN_READER_CONFIDENCE else None
        if grouped:
            prefer = preference(opts.language_preference, reader)
            cands = self.candidates.groups(qvec, n, opts.langs, prefer, lexical, reader)
        else:
            cands = self.candidates.documents(qvec, n, opts.langs, lexical, reader)
        hits = list(cands)
        if rerank and cands:
            head = cands[:rerank_k]
            s = self._rerank_scores(query, qvec, head)
            if r.rerank_fusion:
                s = fuse_scores(s, np.array([h.score for h in head]), r.rerank_fusion)
            order = np.argsort(-s, kind="stable")
            hits = [replace(head[i], score=float(s[i])) for i in order] + cands[rerank_k:]
        return Ranked(qlang, detected, hits[: opts.k], cands, bool(rerank), bool(grouped),
                      lexical.weight if lexical else None)  # fmt: skip

    # -- /rerank ----------------------------------------------------------------------------
    def rerank(self, query: str, texts: list[str]) -> np.ndarray:
        """Scores of ``texts`` for ``query`` by the served reranker (limits checked first)."""
        self.check_rerank(texts)
        return np.asarray(self.reranker.score(query, texts), dtype=np.float64)

    def check_rerank(self, texts: list[str]) -> None:
        """The limits of one rerank request: a 422 naming the field and the limit."""
        lim = self.limits
        if len(texts) > lim.rerank_documents:
            raise BadRequest("documents", f"{len(texts)} documents, at most {lim.rerank_documents} per request")
        for i, t in enumerate(texts):
            if not t.strip():
                raise BadRequest(f"documents[{i}].text", "must not be empty or only whitespace")
            if len(t) > lim.max_document_chars:
                raise BadRequest(
                    f"documents[{i}].text", f"{len(t)} characters, at most {lim.max_document_chars} per document"
                )

    def detect_language(self, text: str) -> str | None:
        det = self.langid.detect(text)
        return det.lang if det else None

    # -- /answer ----------------------------------------------------------------------------
    def answer_mode(self, mode: str | None) -> str:
        """The mode a request gets (its own, else the server's default); extractive needs a reader."""
        mode = mode or self.defaults.answer_mode
        if mode == EXTRACTIVE and self.reader is None:
            raise BadRequest("answer_mode", "extractive needs a reader: start the server with --reader DIR (train one "
                             "with `samelang train reader`), or ask answer_mode 'generative'")  # fmt: skip
        return mode

    def cite(self, ranked: Ranked, passages: int) -> list[Hit]:
        """The first ``passages`` hits of distinct groups (group-aware hits are distinct already; never
        changes the first passage): what ``/answer`` reads and cites."""
        seen: set = set()
        cited = []
        for h in ranked.hits:
            key = h.doc.group or ("row", h.doc.row)
            if key not in seen:
                seen.add(key)
                cited.append(h)
            if len(cited) == passages:
                break
        return cited

    def prepare_answer(self, query: str, opts: SearchOptions, passages: int, max_tokens: int) -> tuple[Ranked, str]:
        """Search as ``/search`` does, keep the first ``passages`` hits of distinct groups (with
        group-aware candidates: distinct documents in the reader's language where the index has
        them), and the prompt over those that fits the generator: (the cited hits, the prompt)."""
        cost, cap = passages * max_tokens, self.limits.max_answer_tokens
        if cost > cap:
            raise BadRequest(
                "max_tokens", f"passages x max_tokens = {passages} x {max_tokens} = {cost}, at most {cap} per request"
            )
        ranked = self.search(query, opts)
        # two language versions of one paragraph would spend the generator's context twice: keep the
        # first-ranked of each group
        cited, prompt = fit_prompt(self.generator, query, self.cite(ranked, passages), max_tokens)
        return replace(ranked, hits=cited), prompt

    def answer(
        self, query: str, opts: SearchOptions, passages: int, max_tokens: int, mode: str | None = None
    ) -> tuple[Ranked, Answered]:
        """The cited hits and the answer over them: the generator's (:meth:`prepare_answer`), or with
        ``mode`` extractive (the default's when ``None``) the reader's span (:func:`.reading.extract`)."""
        if self.answer_mode(mode) == EXTRACTIVE:
            return extract(self, query, opts, passages)
        ranked, prompt = self.prepare_answer(query, opts, passages, max_tokens)
        try:
            text = self.generator.generate(prompt, max_tokens)
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), ranked.hits, refused=isinstance(e, GeneratorRefused)) from e
        return ranked, Answered(text)

    def answer_stream(
        self, query: str, opts: SearchOptions, passages: int, max_tokens: int, mode: str | None = None
    ) -> Iterator:
        """:meth:`answer` as it happens: the cited hits (a :class:`Ranked`) as soon as retrieval is
        done, then each piece of text (a ``str``) as the generator decodes it (an extracted span is
        one piece), then the whole answer (an :class:`Answered`; the same :meth:`answer` gives)."""
        if self.answer_mode(mode) == EXTRACTIVE:
            ranked = prepare_extract(self, query, opts, passages)
            yield ranked
            answered = read(self, query, ranked)
            if answered.text:
                yield answered.text
            yield answered
            return
        ranked, prompt = self.prepare_answer(query, opts, passages, max_tokens)
        yield ranked
        pieces = []
        try:
            for piece in self.generator.stream(prompt, max_tokens):
                pieces.append(piece)
                yield piece
        except GeneratorUnavailable as e:
            raise AnswerUnavailable(str(e), ranked.hits, refused=isinstance(e, GeneratorRefused)) from e
        yield Answered(join_answer(pieces) if self.generator.capabilities.generates else None)
