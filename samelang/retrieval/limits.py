"""The work one request may ask for. Declared here, where the pipeline reads them, and inherited by
:class:`~samelang.service.config.ServiceSettings`, which gives each its ``samelang serve`` flag and its
``SAMELANG_*`` twin: one declaration, and the pipeline never imports the command's settings."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Limits(BaseModel):
    """Each limit is a 422 naming it when a request goes over."""

    max_rerank_documents: int = Field(100, ge=1, le=100, description="documents per /rerank")
    max_document_chars: int = Field(20000, ge=1, le=20000, description="characters per /rerank document")
    max_diagnose_queries: int = Field(1000, ge=1, le=1000, description="labelled queries per /diagnose")
    max_rerank_pairs: int = Field(
        2000, ge=1, description="(query, document) pairs one request may have the reranker score"
    )
    max_answer_tokens: int = Field(1024, ge=1, description="passages x max_tokens of one /answer")
    max_embedding_inputs: int = Field(256, ge=1, le=2048, description="texts per /v1/embeddings request")

    @classmethod
    def of(cls, cfg: BaseModel) -> Limits:
        """The limits of a settings object that declares them (``ServiceSettings``)."""
        return cls(**{name: getattr(cfg, name) for name in cls.model_fields})
