"""Request and response models of the routes shaped like Hugging Face text-embeddings-inference (TEI): ``POST /embed``
(and ``POST /``), ``POST /rerank`` with a ``texts`` body, ``POST /tokenize`` and TEI's fields in ``GET /info``.

Why: Haystack's TEI embedders and ranker, LangChain's ``HuggingFaceEndpointEmbeddings`` and ``huggingface_hub``'s
``InferenceClient`` speak TEI; with these routes they need only samelang's URL. Vectors and scores are the other
routes' own (``/v1/embeddings``, ``/rerank``), computed by the same code. Fields are TEI's, with TEI's defaults,
except where our models differ, and then the field's description says how (``prompt_name``: none by default, as e5
names none; ``truncate``: only the right side is cut; ``normalize: false``: the vectors unnormalised, but a fused
retriever's as they are; ``raw_scores``: a cross-encoder's logit). ``POST /rerank`` serves both bodies: one with
``texts`` is TEI's, one with ``documents`` samelang's own. The rule is the body's content, not the path, because
every TEI client posts to ``{url}/rerank``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from samelang.service.api.fields import (
    MAX_DOCUMENT_CHARS,
    MAX_DOCUMENTS,
    Bool,
    EmbeddingTexts,
    Query,
    StrictModel,
    Text,
    token_ids,
)

Direction = Literal["right", "Right"]  # TEI also cuts on the left; the engines here cut on the right only


def _no_token_ids(v):
    """TEI accepts token ids of its own tokenizer; here they are refused with a reason (a lone text
    becomes a list of one, so that an error names one place: ``inputs[i]``)."""
    if token_ids(v):
        raise ValueError("token ids are not accepted here: send text (POST /tokenize shows how it is split)")
    return [v] if isinstance(v, str) else v


class _Inputs(StrictModel):
    inputs: EmbeddingTexts
    prompt_name: Literal["query", "passage"] | None = Field(
        None,
        description="e5's prompt put before each text: 'query' (questions; also for symmetric uses) or 'passage' "
        "(documents to be retrieved); none (TEI's default): the texts as sent, so put 'query: ' / 'passage: ' "
        "before them yourself",
    )

    @field_validator("inputs", mode="before")
    @classmethod
    def _not_token_ids(cls, v):
        return _no_token_ids(v)


class EmbedRequest(_Inputs):
    """``POST /embed`` (and ``POST /``): TEI's request. The vectors are ``/v1/embeddings``' for the same
    prompted texts (``prompt_name: query`` is ``input_type: query``)."""

    normalize: Bool = Field(
        True, description="L2-normalise each vector (TEI's default); false: the mean-pooled vector as it is"
    )
    truncate: Bool | None = Field(
        False, description="false (TEI's default): a text over the model's window is a 422; true: it is cut"
    )
    truncation_direction: Direction = Field("right", description="only 'right' (the engines cut on the right)")


class TokenizeRequest(_Inputs):
    """``POST /tokenize``: how the served bi-encoder splits each text (the named prompt's tokens first)."""

    add_special_tokens: Bool = Field(True, description="include the special tokens (<s>, </s>)")


class SimpleToken(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None = Field(None, description="the token's first character in the text (null: special or prompt)")
    stop: int | None = None


class TeiRerankRequest(StrictModel):
    """``POST /rerank`` with ``texts``: TEI's request (scores are the served reranker's, as ``/rerank``
    with ``documents`` gives them)."""

    query: Query = Field(...)
    texts: list[Annotated[Text, Field(max_length=MAX_DOCUMENT_CHARS)]] = Field(
        ..., min_length=1, max_length=MAX_DOCUMENTS
    )
    raw_scores: Bool = Field(False, description="a cross-encoder's logit instead of its probability")
    return_text: Bool = Field(False, description="include each text in its result")
    truncate: Bool | None = Field(
        False, description="false (TEI's default): a pair over the reranker's window is a 422; true: it is cut"
    )
    truncation_direction: Direction = Field("right", description="only 'right' (the engines cut on the right)")


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = None


class ModelType(BaseModel):
    embedding: dict | None = Field(None, description="{pooling}: the served bi-encoder's")


class TeiInfo(BaseModel):
    """TEI's ``GET /info`` fields (given beside samelang's own)."""

    model_id: str
    model_sha: str | None
    model_dtype: str
    model_type: ModelType
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None = None
    docker_label: str | None = None
