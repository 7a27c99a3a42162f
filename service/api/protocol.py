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


class SearchRequest(_Strict):
    query: Query = Field(..., description="the question, in any language")
    k: int = Field(10, ge=1, le=1000, description="number of hits")
    lang: Lang | None = Field(None, description="query language (ISO 639-1); detected when absent")
    langs: list[Lang] | None = Field(
        None, min_length=1, max_length=100, description="restrict to these document languages"
    )


class Hit(BaseModel):
    id: str
    score: float
    lang: str | None
    group: str | None
    text: str
    metadata: dict[str, Any] = {}


class SearchResponse(BaseModel):
    query_lang: str | None
    query_lang_detected: bool
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


class AnswerRequest(_Strict):
    query: Query = Field(...)
    lang: Lang | None = None
    k: int = Field(10, ge=1, le=100, description="candidates retrieved")
    rerank_k: int = Field(10, ge=1, le=100, description="candidates reranked (<= k)")
    passages: int = Field(2, ge=1, le=10, description="passages given to the generator")
    max_tokens: int = Field(48, ge=1, le=512)

    @model_validator(mode="after")
    def _bounds(self):
        if self.rerank_k > self.k:
            raise ValueError(f"rerank_k ({self.rerank_k}) must be <= k ({self.k})")
        return self


class CitedPassage(BaseModel):
    id: str
    lang: str | None
    group: str | None
    score: float
    text: str


class AnswerResponse(BaseModel):
    answer: str | None
    answer_lang: str | None
    query_lang: str | None
    generator: str
    reranker: str
    passages: list[CitedPassage]


class LabelledQueryIn(_Strict):
    query: Query = Field(...)
    lang: Lang | None = None
    relevant: list[str] = Field(..., min_length=1, max_length=1000)


class DiagnoseRequest(_Strict):
    queries: list[LabelledQueryIn] | None = Field(None, min_length=1, max_length=5000)
    dataset: Literal["xquad"] | None = None
    split: Literal["train", "test", "all"] = "test"
    pair: str | None = Field(None, description="e.g. 'en-zh': queries in both languages, pool = the index")
    k: int | None = Field(None, ge=1, le=10000, description="ranking depth (default: the whole index, up to 10000)")
    rerank: bool = False
    rerank_k: int = Field(20, ge=1, le=100)

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
    top1_id: str
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
    aggregate: Aggregate
    per_query_lang: dict[str, Aggregate]
    top1_lang_matrix: dict[str, dict[str, float]]
    queries: list[QueryDiagnosis]


class ErrorResponse(BaseModel):
    error: str
    detail: str
    passages: list[CitedPassage] | None = None
