"""The work one request may ask for. Declared here, where the pipeline reads them, and inherited by
:class:`~samelang.service.config.ServiceSettings`, which gives each its ``samelang serve`` flag and its
``SAMELANG_*`` twin: one declaration, and the pipeline never imports the command's settings."""

from __future__ import annotations

from pydantic import BaseModel, Field

# the hard ceilings: what no server may raise its limit past, and what the protocols' own fields allow
# (samelang.service.api.fields reads them here; the OpenAPI schema shows a server's own, lower, limits)
CEILINGS = {"max_rerank_documents": 100, "max_document_chars": 20000, "max_diagnose_queries": 1000,
            "max_embedding_inputs": 2048}  # fmt: skip


class Limits(BaseModel):
    """Each limit is a 422 naming it when a request goes over."""

    max_rerank_documents: int = Field(
        100, ge=1, le=CEILINGS["max_rerank_documents"], description="documents per /rerank"
    )
    max_document_chars: int = Field(
        20000, ge=1, le=CEILINGS["max_document_chars"], description="characters per /rerank document"
    )
    max_diagnose_queries: int = Field(
        1000, ge=1, le=CEILINGS["max_diagnose_queries"], description="labelled queries per /diagnose"
    )
    max_rerank_pairs: int = Field(
        2000, ge=1, description="(query, document) pairs one request may have the reranker score"
    )
    max_answer_tokens: int = Field(1024, ge=1, description="passages x max_tokens of one /answer")
    max_embedding_inputs: int = Field(
        256, ge=1, le=CEILINGS["max_embedding_inputs"], description="texts per /v1/embeddings request"
    )

    @property
    def rerank_documents(self) -> int:
        """Documents one rerank request may send: one query's pairs count against the pairs limit too."""
        return min(self.max_rerank_documents, self.max_rerank_pairs)

    @classmethod
    def of(cls, cfg: BaseModel) -> Limits:
        """The limits of a settings object that declares them (``ServiceSettings``)."""
        return cls(**{name: getattr(cfg, name) for name in cls.model_fields})
