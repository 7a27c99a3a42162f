"""Request and response models of the HTTP API (the OpenAPI schema comes from here)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from indexes.langid import supported_languages

MAX_QUERY_CHARS = 2000
_LANGS = frozenset(supported_languages())


def _query(v: str) -> str:
    if not v.strip():
        raise ValueError("must not be empty or only whitespace")
    return v.strip()


def _lang(v: str | None) -> str | None:
    if v is None:
        return None
    code = v.strip().lower()
    if code not in _LANGS:
        raise ValueError(f"unknown language code {v!r}: use a two-letter ISO 639-1 code such as 'en' or 'zh'")
    return code


Query = Annotated[str, Field(max_length=MAX_QUERY_CHARS), AfterValidator(_query)]
Lang = Annotated[str, AfterValidator(_lang)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class _Retrieval(_Strict):
    """Options shared by /search and /answer (``None``: the server's default, see /info)."""

    rerank: bool | None = Field(None, description="rerank the candidates (default: the server's choice, see /info)")
    group_candidates: bool | None = Field(
        None, description="one candidate per parallel group, in the preferred language (default: the server's choice)"
    )
    language_preference: LanguagePreference = "reader"


class SearchRequest(_Retrieval):
    query: Query = Field(..., description="the question, in any language")
    k: int = Field(10, ge=1, le=1000, description="number of hits")
    lang: Lang | None = Field(None, description="query language (ISO 639-1); detected when absent")
    langs: list[Lang] | None = Field(
        None, min_length=1, max_length=100, description="restrict to these document languages"
    )
    rerank_k: int | None = Field(None, ge=1, le=100, description="candidates reranked (default: the server's)")


class Version(BaseModel):
    id: str
    lang: str | None


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


class SearchResponse(BaseModel):
    query_lang: str | None
    query_lang_detected: bool
    components: Components
    hits: list[Hit]


class RerankDocument(_Strict):
    id: str | None = None
    text: str
    lang: Lang | None = None


class RerankRequest(_Strict):
    query: Query = Field(...)
    documents: list[str | RerankDocument] = Field(..., min_length=1)
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False
    lang: Lang | None = None

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
    k: int = Field(20, ge=1, le=100, description="candidates retrieved")
    rerank_k: int | None = Field(
        None, ge=1, le=100, description="candidates reranked (<= k; default: the server's, capped at k)"
    )
    passages: int = Field(2, ge=1, le=10, description="passages given to the generator")
    max_tokens: int = Field(48, ge=1, le=512)

    @model_validator(mode="after")
    def _bounds(self):
        if self.rerank_k is not None and self.rerank_k > self.k:
            raise ValueError(f"rerank_k ({self.rerank_k}) must be <= k ({self.k})")
        return self


class CitedPassage(BaseModel):
    id: str
    lang: str | None
    group: str | None
    score: float
    text: str
    versions: list[Version] = []


class AnswerResponse(BaseModel):
    answer: str | None
    answer_lang: str | None
    query_lang: str | None
    generator: str
    components: Components
    passages: list[CitedPassage]


class LabelledQueryIn(_Strict):
    query: Query = Field(...)
    lang: Lang | None = None
    relevant: list[str] = Field(..., min_length=1, max_length=1000)


class DiagnoseRequest(_Retrieval):
    queries: list[LabelledQueryIn] | None = Field(None, min_length=1, max_length=5000)
    dataset: Literal["xquad"] | None = None
    split: Literal["train", "test", "all"] = "test"
    pair: str | None = Field(None, description="e.g. 'en-zh': queries in both languages, pool = the index")
    k: int | None = Field(None, ge=1, le=10000, description="ranking depth (default: the whole index, up to 10000)")
    rerank: bool | None = Field(
        None, description="rerank each list's head as /search does (default: what /search does by default, see /info)"
    )
    rerank_k: int | None = Field(None, ge=1, le=100, description="candidates reranked (default: the server's)")

    @model_validator(mode="after")
    def _one_source(self):
        if (self.queries is None) == (self.dataset is None):
            raise ValueError("give either 'queries' or 'dataset' (with 'pair'), not both or neither")
        if self.dataset is not None:
            if not self.pair or self.pair.count("-") != 1:
                raise ValueError("'pair' is required with 'dataset', as two language codes like 'en-zh'")
            for code in self.pair.split("-"):
                _lang(code)
        return self


class QueryDiagnosis(BaseModel):
    query: str
    lang: str | None
    ranks: dict[str, int | None]
    max_r: int | None
    max_r_norm: float | None
    comp_at_10: bool
    top1_id: str | None
    top1_lang: str | None
    censored: bool = Field(description="a relevant document lies beyond the ranking depth k")


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
    aggregate: Aggregate
    per_query_lang: dict[str, Aggregate]
    top1_lang_matrix: dict[str, dict[str, float]]
    queries: list[QueryDiagnosis]


class ErrorResponse(BaseModel):
    error: str
    detail: str
    passages: list[CitedPassage] | None = None
