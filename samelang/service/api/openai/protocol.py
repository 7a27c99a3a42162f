"""Request and response models of the ecosystem-shaped routes: OpenAI's ``POST /v1/embeddings``
and ``GET /v1/models``, and the Cohere / Jina ``POST /v1/rerank`` (``/v2/rerank``: the path the
Cohere v2 client posts to).

Why these shapes: the OpenAI, Cohere and Jina SDKs, LangChain and LlamaIndex all speak them, and
text-embeddings-inference, infinity-emb and vLLM serve them for that reason; a client then needs
only a base URL to use samelang. The bodies are what those clients send, field for field; fields
that they may send and that would change nothing here (OpenAI's ``user``) are accepted and
documented as ignored, and anything else is refused with a 422 naming it (an option that silently
does nothing is worse than an error). Our additions are optional: ``input_type`` (e5 was trained
with a ``query: `` / ``passage: `` prompt) and the ``lang`` of a rerank document and result.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from samelang.service.api import fields as F


class EmbeddingsRequest(F.StrictModel):
    """``POST /v1/embeddings``: OpenAI's request. The vectors are the served bi-encoder's, L2-normalised
    (the index's own metric is their dot product)."""

    # a lone text is taken as a list of one (below), so that an error names one place: input[i]
    input: F.EmbeddingTexts
    model: str = Field(..., max_length=200, description="the served bi-encoder's name (GET /v1/models lists it)")
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: each vector as little-endian float32 bytes (what the OpenAI SDK asks for)"
    )
    dimensions: F.Int | None = Field(
        None, description="not supported: the model has one size (its dimension is in GET /v1/models); omit it"
    )
    user: str | None = Field(None, max_length=256, description="accepted for compatibility, ignored")
    input_type: Literal["query", "passage"] = Field(
        "query",
        description="samelang extension: e5's prompt, 'query' (questions; also what e5's card advises for "
        "symmetric uses) or 'passage' (documents to be retrieved)",
    )

    @field_validator("input", mode="before")
    @classmethod
    def _not_token_ids(cls, v):
        """Token-id input (OpenAI accepts its own tokenizer's ids) means nothing to another model: say
        which client setting sends them, instead of a bare type error."""
        if F.token_ids(v):
            raise ValueError(
                "token ids are not accepted (they are an OpenAI tokenizer's, not this model's): send text. "
                "LangChain's OpenAIEmbeddings sends ids unless check_embedding_ctx_length=False"
            )
        return [v] if isinstance(v, str) else v

    def texts(self) -> list[str]:
        return list(self.input)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "samelang"
    task: Literal["embeddings", "rerank"] = Field(description="samelang extension: the route that serves it")
    dimensions: int | None = Field(None, description="samelang extension: the embedding size")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class CompatRerankDocument(F.StrictModel):
    """A Jina / Cohere v1 document object; ``lang`` and ``id`` are samelang extensions."""

    text: Annotated[F.Text, Field(max_length=F.MAX_DOCUMENT_CHARS)]
    lang: F.Lang | None = None
    id: F.DocId | None = None


class CompatRerankRequest(F.StrictModel):
    """``POST /v1/rerank`` and ``/v2/rerank``: Cohere's and Jina's request. Scores are the served
    reranker's, exactly as ``POST /rerank`` gives them."""

    model: str | None = Field(None, max_length=200, description="the served reranker's name (GET /v1/models)")
    query: F.Query = Field(...)
    documents: list[F.text_or(CompatRerankDocument)] = Field(
        ..., min_length=1, max_length=F.MAX_DOCUMENTS, description="texts, or {text, lang?, id?} objects"
    )
    top_n: F.Int | None = Field(None, ge=1, le=F.MAX_DOCUMENTS)
    return_documents: F.Bool = Field(False, description="include each result's document (Cohere v1 / Jina)")
    max_tokens_per_doc: F.Int | None = Field(
        None, ge=1, le=4096, description="cut each document to its first N tokens of the reranker's tokenizer"
    )

    def normalised_documents(self) -> list[CompatRerankDocument]:
        return [CompatRerankDocument(text=d) if isinstance(d, str) else d for d in self.documents]


class RerankedDocument(BaseModel):
    text: str


class CompatRerankResult(BaseModel):
    index: int
    relevance_score: float = Field(
        description="the served reranker's score, as POST /rerank gives it: in (0, 1) for a cross-encoder, the "
        "cosine in [-1, 1] for the bi-encoder fallback"
    )
    document: RerankedDocument | None = None
    lang: str | None = Field(None, description="samelang extension: the document's language (given, else detected)")


class RerankUsage(BaseModel):
    total_tokens: int


class CompatRerankResponse(BaseModel):
    id: str | None = Field(None, description="the request id (X-Request-ID)")
    model: str
    results: list[CompatRerankResult]
    usage: RerankUsage
