"""Request and response models of samelang's own routes (``/search``, ``/rerank``, ``/answer``,
``/diagnose``): the OpenAPI schema comes from here."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, Strict, model_validator

from samelang.corpora import XQUAD_LANGS
from samelang.service.api.fields import (
    MAX_DIAGNOSE_QUERIES,
    MAX_DOCUMENT_CHARS,
    MAX_DOCUMENTS,
    Bool,
    DocId,
    Int,
    Lang,
    Query,
    StrictModel,
    Text,
    text_or,
)
from samelang.service.api.shared import CitedPassage, Version


def _preference(v: str | list[str]) -> str | tuple[str, ...]:
    if isinstance(v, str):
        if v not in ("reader", "any"):
            raise ValueError(f"must be 'reader', 'any' or a list of language codes, got {v!r}")
        return v
    if len(set(v)) != len(v):
        raise ValueError(f"lists a language twice: {v}")
    return tuple(v)


LanguagePreference = Annotated[
    str | Annotated[list[Lang], Field(min_length=1, max_length=20)],
    AfterValidator(_preference),
    Field(
        description="which language version of a parallel group leads its hit: 'reader' (the query's language, "
        "default), 'any' (the retriever's best version), or languages in order of preference (e.g. ['de', 'en'])"
    ),
]


class _Retrieval(StrictModel):
    """Options shared by /search and /answer (``None``: the server's default, see /info)."""

    rerank: Bool | None = Field(None, description="rerank the candidates (default: the server's choice, see /info)")
    group_candidates: Bool | None = Field(
        None, description="one candidate per parallel group, in the preferred language (default: the server's choice)"
    )
    language_preference: LanguagePreference = "reader"
    lexical_weight: Annotated[float, Strict()] | None = Field(
        None,
        ge=0,
        le=10,
        description="hybrid retrieval: cosine + W * BM25 / the query's best BM25; 0: dense only (default: the "
        "server's, see /info)",
    )


class SearchRequest(_Retrieval):
    query: Query = Field(..., description="the question, in any language")
    k: Int = Field(10, ge=1, le=1000, description="number of hits")
    lang: Lang | None = Field(None, description="query language (ISO 639-1); detected when absent")
    langs: list[Lang] | None = Field(
        None, min_length=1, max_length=100, description="restrict to these document languages"
    )
    rerank_k: Int | None = Field(None, ge=1, le=100, description="candidates reranked (default: the server's)")


class Hit(BaseModel):
    id: str
    score: float = Field(description="the reranker's score for reranked hits, else the retriever's cosine")
    lang: str | None
    group: str | None
    text: str
    metadata: dict[str, Any] = {}
    versions: list[Version] = Field(
        [], description="the other language versions of this hit's group in the index (group-aware candidates)"
    )


class Components(BaseModel):
    retriever: str
    reranker: str | None = Field(description="the reranker that ordered the hits, null when none did")
    candidates: Literal["groups", "documents"]
    lexical_weight: float | None = Field(None, description="BM25's weight in the retriever's score; null: dense only")


class SearchResponse(BaseModel):
    query_lang: str | None
    query_lang_detected: bool
    components: Components
    hits: list[Hit]


class RerankDocument(StrictModel):
    id: DocId | None = None
    text: Annotated[Text, Field(max_length=MAX_DOCUMENT_CHARS)]
    lang: Lang | None = None


class RerankRequest(StrictModel):
    """``POST /rerank``: the configured reranker's score of ``query`` against each of ``documents``.

    No request-level ``lang`` (an early version accepted one and ignored it): the reranker scores each
    (query, document) pair from the two texts alone, so a declared query language could change neither a
    score nor the order, and the languages a response reports are the documents' own (a document object's
    ``lang``, else detected). Unknown fields are refused, so a client still sending it gets a 422 naming
    the field (``lang: Extra inputs are not permitted``) instead of an option that silently does nothing.
    """

    query: Query = Field(...)
    documents: list[text_or(RerankDocument)] = Field(
        ..., min_length=1, max_length=MAX_DOCUMENTS, description="texts, or {id?, text, lang?} objects"
    )
    top_n: Int | None = Field(None, ge=1, le=MAX_DOCUMENTS)
    return_documents: Bool = False

    def normalised_documents(self) -> list[RerankDocument]:
        return [RerankDocument(text=d) if isinstance(d, str) else d for d in self.documents]


class RerankResult(BaseModel):
    index: int
    id: str | None
    score: float
    lang: str | None
    text: str | None = None


class RerankResponse(BaseModel):
    reranker: str
    results: list[RerankResult]


class AnswerRequest(_Retrieval):
    query: Query = Field(...)
    lang: Lang | None = None
    k: Int = Field(20, ge=1, le=100, description="candidates retrieved")
    rerank_k: Int | None = Field(
        None, ge=1, le=100, description="candidates reranked (<= k; default: the server's, capped at k)"
    )
    passages: Int = Field(2, ge=1, le=10, description="passages given to the generator (or read by the reader)")
    answer_mode: Literal["extractive", "generative"] | None = Field(
        None,
        description="extractive: the reader copies the answer out of the passages (no answer when unsure); "
        "generative: the generator writes it (default: the server's, GET /info)",
    )
    max_tokens: Int = Field(48, ge=1, le=512, description="tokens generated at most; passages x max_tokens is capped")
    stream: Bool = Field(
        False,
        description="answer with server-sent events: 'passages' (the cited passages, as soon as retrieval is done), "
        "'token' (each piece of the answer as it is generated), then 'done' (this response, with timing) or "
        "'error' (the error body)",
    )

    @model_validator(mode="after")
    def _bounds(self):
        if self.rerank_k is not None and self.rerank_k > self.k:
            raise ValueError(f"rerank_k ({self.rerank_k}) must be <= k ({self.k})")
        return self


class AnswerResponse(BaseModel):
    answer: str | None
    answer_lang: str | None = Field(
        description="the answer's language: an extracted span's passage language, a generated answer's detected one"
    )
    answer_mode: Literal["extractive", "generative"]
    query_lang: str | None
    generator: str
    components: Components
    passages: list[CitedPassage]
    citations: list[str] = Field(
        [], description="ids of the passages the answer was taken from (the ones that hold it, or its longest part)"
    )


class AnswerPassagesEvent(BaseModel):
    """A streamed answer's first event: what the generator (or the reader) was given, before it starts."""

    query_lang: str | None
    answer_mode: Literal["extractive", "generative"]
    generator: str
    components: Components
    passages: list[CitedPassage]


class AnswerTokenEvent(BaseModel):
    text: str = Field(description="the next piece of the answer (the pieces joined and stripped are the answer)")


class AnswerTiming(BaseModel):
    retrieval_ms: float = Field(description="from the start of the request's work (body parsed) to the passages")
    first_token_ms: float | None = Field(description="to the first piece of the answer (null: none came)")
    total_ms: float


class AnswerDoneEvent(AnswerResponse):
    """A streamed answer's last event: the non-streaming response, and when things happened."""

    timing: AnswerTiming


class LabelledQueryIn(StrictModel):
    query: Query = Field(...)
    lang: Lang | None = None
    relevant: list[DocId] | None = Field(
        None, min_length=1, max_length=1000,
        description="ids of the documents that answer it (optional: without, the query counts in the language-bias "
        "report only, not in Max@R)",
    )  # fmt: skip


class DiagnoseRequest(_Retrieval):
    queries: list[LabelledQueryIn] | None = Field(None, min_length=1, max_length=MAX_DIAGNOSE_QUERIES)
    dataset: Literal["xquad"] | None = None
    split: Literal["train", "test", "all"] = "test"
    pair: str | None = Field(
        None,
        pattern=r"^\s*[A-Za-z]{2}-[A-Za-z]{2}\s*$",
        description=f"e.g. 'en-zh': queries in both languages, pool = the index; XQuAD has {', '.join(XQUAD_LANGS)}",
    )
    sample: Int | None = Field(
        None, ge=1, le=MAX_DIAGNOSE_QUERIES,
        description="no queries at hand: this many unlabelled ones drawn from the index's own documents (one sentence "
        "each, the same number per language; the source document is left out of its own list)",
    )  # fmt: skip
    seed: Int = Field(0, ge=0, le=2**31 - 1, description="which sample (the same seed, the same queries)")
    k: Int | None = Field(
        None, ge=1, le=10000,
        description="ranking depth of Max@R (default: the whole index, up to 10000; labelled queries only)",
    )  # fmt: skip
    bias_k: Int = Field(10, ge=1, le=100, description="the top-k whose languages the bias report counts")
    rerank: Bool | None = Field(
        None, description="rerank each list's head as /search does (default: what /search does by default, see /info)"
    )
    rerank_k: Int | None = Field(None, ge=1, le=100, description="candidates reranked (default: the server's)")

    @model_validator(mode="after")
    def _one_source(self):
        if sum(x is not None for x in (self.queries, self.dataset, self.sample)) != 1:
            raise ValueError("give one of 'queries', 'dataset' (with 'pair') or 'sample'")
        if self.dataset is not None:
            if not self.pair or self.pair.count("-") != 1:
                raise ValueError("'pair' is required with 'dataset', as two language codes like 'en-zh'")
            codes = [c.strip().lower() for c in self.pair.split("-")]
            missing = [c for c in codes if c not in XQUAD_LANGS]
            if missing:
                raise ValueError(
                    f"pair: XQuAD has no {', '.join(repr(c) for c in missing)}; its languages are "
                    f"{', '.join(XQUAD_LANGS)}"
                )
            if codes[0] == codes[1]:
                raise ValueError(f"pair: two different languages, got {self.pair!r}")
            self.pair = "-".join(codes)
        return self


class QueryDiagnosis(BaseModel):
    query: str
    lang: str | None
    top1_id: str | None
    top1_lang: str | None
    top_langs: list[str] = Field(description="the languages of its first bias_k hits, in order")
    sees_other_lang: bool = Field(description="its top bias_k holds a document in another language")
    source_id: str | None = Field(description="the document a sampled query was drawn from (left out of its list)")
    ranks: dict[str, int | None] = Field(description="rank of each relevant id (labelled queries)")
    max_r: int | None
    max_r_norm: float | None
    comp_at_10: bool | None
    censored: bool | None = Field(description="a relevant document lies beyond the ranking depth k")


class LanguageBias(BaseModel):
    """The top-k's languages against the index's, per query language (no labels needed); shares in %."""

    k: int = Field(description="the top-k counted (bias_k)")
    index_langs: dict[str, float] = Field(description="share of the index's documents in each language")
    queries: dict[str, int]
    result_langs: dict[str, dict[str, float]] = Field(
        description="query language -> result language -> share of the top-k results (rows sum to 100)"
    )
    jsd: dict[str, float | None] = Field(
        description="Jensen-Shannon divergence (bits, 0 to 1) of result_langs from index_langs, per query language"
    )
    sees_other: dict[str, float] = Field(description="share of the queries whose top-k holds another language")
    mean_jsd: float | None
    sees_other_all: float | None


class Aggregate(BaseModel):
    queries: int
    mean_max_r: float | None
    max_r_norm: float | None
    comp_at_10: float
    same_lang_top1: float | None
    censored: int


class DiagnoseResponse(BaseModel):
    pool_size: int
    k: int
    reranker: str | None
    components: Components
    labelled: int = Field(description="queries with relevant ids (those Max@R is over)")
    bias: LanguageBias
    aggregate: Aggregate | None = Field(description="Max@R and more over the labelled queries (None: none is)")
    per_query_lang: dict[str, Aggregate]
    top1_lang_matrix: dict[str, dict[str, float]]
    queries: list[QueryDiagnosis]
